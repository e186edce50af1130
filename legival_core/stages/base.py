"""The one stage protocol: plan what the store lacks, run it on an executor, commit each result.

Every stage (ingest, grade, segment, efficiency, transfer, judge, quality, rewards, monitor,
generate, report) is an object with

    plan(store)            -> Plan: the missing units (and the counts of what is already stored)
    run(units, executor)   -> batches of results, computed without the store (any process)
    commit(store, results) -> rows written, in one transaction per batch

and `run_stage` drives it the same way for the CLI commands and the Prefect tasks, so they cannot
drift. A crash loses at most the batches in flight: every committed batch stays, and the next plan
lists only what is still missing. Each stage is registered once (`legival_core.stages.registered`):
what it needs, the cheap stages run first (`requires`: steps before judge), and what a spec's run
does with it.

Executors run a `Work` (how to build a worker, e.g. load a model, and what it does with a chunk of
units): `InProcessExecutor` and `ProcessExecutor` (CPU-bound work on every core) here, the Ray engine
pool in `tasks/` (same `Work`, one actor per engine, units routed by key so all prefixes of a trace
meet the same prefix cache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from legival_core.lifecycle.cancel import raise_if_cancelled
from legival_core.lifecycle.children import disown, own
from legival_core.registry import entry, is_registered
from legival_core.stages.isolation import (
    StageFailures,
    UnitFailure,
    current,
    failure_stage,
    isolated,
    split_failures,
    unit_key,
)
from legival_core.store import Store
from legival_core.store import failures as failure_rows

if TYPE_CHECKING:
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

U = TypeVar("U")
R = TypeVar("R")
W = TypeVar("W")
S = TypeVar("S")

Progress = Callable[[int, int], None]
"""progress(done, total) in the stage's own unit (traces, rollouts, calls)."""


@dataclass(frozen=True)
class Work(Generic[W, U, R]):
    """What an executor runs. `setup()` builds a worker once per process (a model, a client), lazily:
    no unit, no setup. `process(worker, chunk)` turns a chunk of units into results (pure: no store).
    `route(unit)` keys units that must meet the same worker in order (prefix-cache locality).
    Everything is picklable (module-level callables, frozen dataclasses) so Ray can ship it."""

    setup: Callable[[], W]
    process: Callable[[W, Sequence[U]], list[R]]
    chunk_size: int = 64
    route: Callable[[U], str] | None = None
    teardown: Callable[[W], None] | None = None
    key: str = ""
    """Workers of equal key may be reused across runs (a Ray executor keeps one pool per student)."""
    warm: Callable[[W], None] | None = None
    """Make the worker ready now (load the model) instead of on its first chunk."""
    loaded: Callable[[W], bool] | None = None
    """Whether the worker has loaded its model (a lazy worker that got no work has not)."""
    isolate: Callable[[U, str], list[R]] | None = None
    """`ProcessExecutor` only: the results to store for a unit whose process died (a crash in native
    code, the OOM killer) or hung, with the reason. Set, a failed chunk is rerun unit by unit in fresh
    processes and only the unit that fails again gets these results; None: the failure stops the run."""
    unit_timeout_s: float | None = None
    """`ProcessExecutor` with `isolate`: a chunk running longer than this per unit (plus the worker's
    start) is treated as hung: its processes are killed and it is rerun unit by unit, each with this limit."""


@dataclass(frozen=True, slots=True, eq=False)
class Given(Generic[W]):
    """`Work.setup` for a worker the caller built and keeps (a backend, a judge, an engine): handed
    out as is and never closed by the stage (in-process only: it is not shipped to other processes)."""

    worker: W

    def __call__(self) -> W:
        return self.worker


def phase_progress(progress: Callable[[str, int, int], None] | None, phase: str,
                   when: Callable[[int, int], bool] = lambda _done, total: total > 0) -> Progress | None:
    """Adapt a phase-aware progress callback (a command running several stages, one per group or model)
    to one stage's progress(done, total); `when` filters the calls worth showing."""
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        if when(done, total):
            progress(phase, done, total)

    return report


def engine_for(key: str, n_engines: int) -> int:
    """The engine a unit routed by `key` goes to (`Work.route`): stable across processes and runs
    (Python's `hash` is salted per process), so the Ray pool and the plan's cost model agree."""
    import hashlib

    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") % n_engines


class Executor(Protocol):
    def run(self, work: Work[Any, U, R], units: Sequence[U]) -> Iterator[list[R]]:
        """Yield results chunk by chunk (in any order) as they finish."""
        ...


class InProcessExecutor:
    """Runs the chunks one after another in this process, with one lazily built worker."""

    def __init__(self) -> None:
        self._workers: dict[int, Any] = {}

    def run(self, work: Work[Any, U, R], units: Sequence[U]) -> Iterator[list[R]]:
        if not units:
            return
        work = isolated(work)
        worker = work.setup()
        try:
            for i in range(0, len(units), max(1, work.chunk_size)):
                yield work.process(worker, units[i : i + work.chunk_size])
        finally:
            if work.teardown is not None:
                work.teardown(worker)


_process_worker: Any = None


def _start_process_worker(setup: Callable[[], Any]) -> None:
    global _process_worker
    _process_worker = setup()


def _process_chunk(process: Callable[[Any, Sequence[Any]], list[Any]], chunk: Sequence[Any]) -> list[Any]:
    return process(_process_worker, chunk)


class ProcessExecutor:
    """Runs the chunks on `workers` processes of this machine (default: the CPUs this process may use),
    each building its worker once, and yields their results in the chunks' order, so that commits
    and progress are those of the in-process executor. For CPU-bound work that holds the GIL (Z3).
    Processes are spawned, never forked: the parent's threads (DuckDB, Prefect, Ray) and their locks
    stay out of them. `Work` must be picklable (it is, for Ray). With one worker, or one chunk, it
    runs in process."""

    def __init__(self, workers: int | None = None, start_s: float | None = None) -> None:
        self.workers = workers if workers is not None else usable_cpus()
        self.start_s = WORKER_START_S if start_s is None else start_s
        """Slack for a fresh process to start and build its worker, added to a chunk's time limit."""

    def run(self, work: Work[Any, U, R], units: Sequence[U]) -> Iterator[list[R]]:
        from collections import deque

        work = isolated(work)
        size = max(1, work.chunk_size)
        chunks = [units[i : i + size] for i in range(0, len(units), size)]
        n = min(self.workers, len(chunks))
        if not chunks or (n <= 1 and work.isolate is None):  # isolation needs a process, even for one chunk
            yield from InProcessExecutor().run(work, units)
            return
        runner = _ProcessRunner(work, max(1, n), self.start_s)
        try:
            pending: deque[tuple[Sequence[U], Future[list[R]]]] = deque()
            for chunk in chunks:
                pending.append((chunk, runner.submit(chunk)))
                if len(pending) > 2 * n:
                    yield runner.collect(pending)
            while pending:
                yield runner.collect(pending)
        except BaseException:  # a failed commit or chunk, a closed generator: queued chunks are dropped,
            runner.abort()     # and running ones stopped (a hung one would never return)
            raise
        runner.close()


WORKER_START_S = 60.0
"""`ProcessExecutor.start_s` by default."""
MAX_FAILED_IN_A_ROW = 3
"""Units failing alone one after the other: past this, the workers themselves are broken and the run stops."""


class _ProcessRunner(Generic[U, R]):
    """The process pool of one `ProcessExecutor.run`, rebuilt after a process died or hung."""

    def __init__(self, work: Work[Any, U, R], n: int, start_s: float) -> None:
        self.work, self.n, self.start_s = work, n, start_s
        self.failed_in_a_row = 0
        self._owned: set[int] = set()
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(self.n, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_process_worker, initargs=(self.work.setup,))

    def submit(self, chunk: Sequence[U]) -> Future[list[R]]:
        """The chunk's future; on a pool that broke meanwhile, a future holding that error, which
        `collect` handles like any other process death."""
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        try:
            fut = self.pool.submit(_process_chunk, self.work.process, chunk)
        except BrokenProcessPool as e:
            fut = Future()
            fut.set_exception(e)
            return fut
        self._own()
        return fut

    def _own(self) -> None:
        """The pool's processes (started by the first submits) as this process's children: ended by
        the guardian if this process dies first (`legival_core.lifecycle.children`)."""
        for pid in list(getattr(self.pool, "_processes", None) or {}):
            if pid not in self._owned:
                self._owned.add(pid)
                own(pid, "a worker process of a stage")

    def _disown(self) -> None:
        for pid in self._owned:
            disown(pid)
        self._owned.clear()

    def _limit(self, units: int) -> float | None:
        t = self.work.unit_timeout_s
        return None if t is None or self.work.isolate is None else t * units + self.start_s

    def collect(self, pending: deque[tuple[Sequence[U], Future[list[R]]]]) -> list[R]:
        """The oldest pending chunk's results; after a process death or a hang, the chunk rerun unit by
        unit in fresh processes, then the other pending chunks resubmitted (their pool is gone)."""
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        chunk, fut = pending.popleft()
        try:
            return fut.result(timeout=self._limit(len(chunk)))
        except (BrokenProcessPool, FutureTimeout):
            if self.work.isolate is None:
                raise
        self._restart()
        out: list[R] = []
        for unit in chunk:
            out += self._one(unit)
        for i, (c, _) in enumerate(pending):
            pending[i] = (c, self.submit(c))
        return out

    def _one(self, unit: U) -> list[R]:
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        assert self.work.isolate is not None
        fut = self.submit([unit])
        try:
            result = fut.result(timeout=self._limit(1))
        except BrokenProcessPool:
            reason = "its worker process died (a crash in native code or out of memory)"
        except FutureTimeout:
            reason = f"timed out after {self.work.unit_timeout_s:g} s (its worker process was stopped)"
        else:
            self.failed_in_a_row = 0
            return result
        self.failed_in_a_row += 1
        if self.failed_in_a_row >= MAX_FAILED_IN_A_ROW:
            # not one bad unit: the workers cannot start (setup fails) or the machine kills them all
            raise RuntimeError(f"{MAX_FAILED_IN_A_ROW} units in a row failed alone ({reason}): the worker "
                               "processes cannot run; nothing was stored for these units")
        self._restart()
        return self.work.isolate(unit, reason)

    def _restart(self) -> None:
        """Kill the pool's processes (a hung one never returns) and start a new pool."""
        self._kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()

    def _kill(self) -> None:
        for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
            with suppress(Exception):
                proc.kill()
        self._disown()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self._disown()

    def abort(self) -> None:
        """Stop now: queued chunks dropped, running processes killed (`close` would wait for them)."""
        self._kill()
        self.pool.shutdown(wait=False, cancel_futures=True)


def usable_cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class Plan(Generic[U, S]):
    """A stage's plan: the units to compute, how many work items they hold (`total`, the progress
    bar's length) of which `done` are already stored, and the summary the commits fill in."""

    units: list[U]
    summary: S
    total: int = 0
    done: int = 0
    notes: list[str] = field(default_factory=list)
    failures: list[UnitFailure] = field(default_factory=list)
    """Units the plan itself found unusable (a record over the size limit): stored as failures."""
    chunk_size: int | None = None
    """Units per chunk the plan chose from what it found (a small transfer shard commits more often);
    `run_stage` gives it to the executor in place of the stage's `Work.chunk_size`. None: the stage's."""


@dataclass(frozen=True, slots=True)
class _Sized:
    """An executor running every `Work` in chunks of `size` units (a plan's `chunk_size`)."""

    inner: Executor
    size: int

    def run(self, work: Work[Any, U, R], units: Sequence[U]) -> Iterator[list[R]]:
        return self.inner.run(replace(work, chunk_size=self.size), units)


class Stage(Protocol[U, R, S]):
    @property
    def name(self) -> str: ...

    def plan(self, store: Store) -> Plan[U, S]: ...

    def run(self, units: Sequence[U], executor: Executor) -> Iterator[list[R]]: ...

    def commit(self, store: Store, results: Sequence[R], plan: Plan[U, S]) -> int:
        """Write one batch of results; returns how many work items it completed (for progress)."""
        ...


StoreAccess = Callable[[], AbstractContextManager[Store]]
"""How a runner reaches the store: the CLI holds one open store; the Prefect driver shares one
connection between task threads under a lock (`tasks.store_lock.locked_store`)."""


def store_access(store: Store) -> StoreAccess:
    return lambda: nullcontext(store)


def run_stage(
    stage: Stage[U, R, S],
    store: Store | StoreAccess,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> S:
    """plan -> run -> commit per batch, the same for every caller; returns the stage's summary.

    Units that failed alone (`legival_core.stages.isolation`) are stored with their reason instead of
    committed, counted in the run's ledger (`isolation.current().ledger`, the command's `failed: N`),
    and left out of the next run's plan unless it retries them (`--retry-failed`, or a new code version)."""
    access = store_access(store) if isinstance(store, Store) else store
    for pre in required(stage.name):
        run_stage(pre, access, None)
    settings = current()
    name = failure_stage(stage)
    ledger = StageFailures(name)
    version = stage_code_version(stage)
    with access() as s:
        plan = stage.plan(s)
        before = failure_rows.failed_units(s, name)
        if plan.failures:
            failure_rows.record_failures(s, [_failure_row(name, f, version) for f in plan.failures])
    ledger.failed += plan.failures
    units, retried = _without_failed(plan.units, before, version, settings.retry_failed, ledger)
    ledger.attempted = len(units) + len(plan.failures)
    if ledger.attempted or ledger.skipped:
        settings.ledger.append(ledger)
    done = plan.done
    if progress is not None:
        progress(done, plan.total)
    failed: set[str] = set()
    if units:
        raise_if_cancelled(f"the {name} stage")
        ex: Executor = executor or InProcessExecutor()
        if plan.chunk_size is not None:
            ex = _Sized(ex, plan.chunk_size)
        for batch in stage.run(units, ex):
            results, failures = split_failures(batch)
            with access() as s:
                if failures:
                    failure_rows.record_failures(s, [_failure_row(name, f, version) for f in failures])
                if results or not failures:  # an empty batch is committed as before (a judge counts held-back calls)
                    done += stage.commit(s, results, plan)
            ledger.failed += failures
            failed.update(f.unit_key for f in failures)
            if progress is not None:
                progress(done, plan.total)
            raise_if_cancelled(f"the next batch of the {name} stage")  # this batch is committed
    if retried:
        with access() as s:  # computed this time: no longer failed
            failure_rows.clear_failures(s, name, [k for k in retried if k not in failed])
    return plan.summary


def stage_code_version(stage: Any) -> str:
    """The version of the code that produces a stage's rows: Legi-Val's, and the stage's own
    `code_version` when it declares one. A failure stored under another version is retried."""
    from legival_core import __version__

    own = getattr(stage, "code_version", "")
    return f"{__version__}+{own}" if own else __version__


def _without_failed(units: list[U], before: dict[str, str], version: str, retry: bool,
                    ledger: StageFailures) -> tuple[list[U], list[str]]:
    """The plan's units less those that failed before under this code version (unless `retry`), and
    the keys of the failed ones run again."""
    if not before:
        return units, []
    keep: list[U] = []
    retried: list[str] = []
    for u in units:
        k = unit_key(u)
        was = before.get(k)
        if was is None:
            keep.append(u)
        elif retry or was != version:
            keep.append(u)
            retried.append(k)
        else:
            ledger.skipped += 1
    return keep, retried


def _failure_row(stage: str, f: UnitFailure, version: str) -> dict[str, Any]:
    return {"stage": stage, "unit_key": f.unit_key, "trace_id": f.trace_id, "teacher": f.teacher,
            "dataset": f.dataset, "code_version": version, "reason": f.reason}


def required(stage_name: str) -> list[Any]:
    """The stages to run before a stage object named `stage_name`: its registration's `requires`
    (`legival_core.stages.registered`), each built by its `standalone` factory."""
    if not is_registered("stage", stage_name):
        return []
    out = []
    for name in entry("stage", stage_name).meta.requires:
        pre = entry("stage", name).meta.standalone
        if pre is None:
            raise ValueError(f"stage {stage_name!r} requires {name!r}, which has no standalone stage")
        out.append(pre())
    return out
