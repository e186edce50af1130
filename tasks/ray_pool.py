"""The Ray executor: long-lived worker actors (one model load per engine, not per task) that run a
stage's `Work` (legival_core.stages.base), the same `Work` the in-process executor runs.

Units are routed by a stable hash of `work.route(unit)`, so every prefix of a trace goes to the same
engine, and one engine runs its chunks in submission order (an actor with one thread executes calls
in order): its prefix cache sees a trace's prefixes shortest first. Units of one engine are batched
`work.chunk_size` at a time into one actor call, so the backend batches across traces too.

Workers build their state lazily (`work.setup`, e.g. a `LazyBackend`): an engine that gets no work
never loads its model, and the pool itself starts no actor (and no Ray) until there is work. Pools are
keyed by `work.key` (the student) and live for the flow run, shared by its shard tasks. Resources
(`num_gpus`, `num_cpus`) and the preferred nodes (`engine_labels`) come from the spec's `execution`
section and are set here, at the call site.

A lost engine (its process, or its node, died) is recreated and the chunks it had not returned are
submitted again, in their order, to the new engine (wherever Ray places it: a preferred node if one is
alive, else any node with room); a chunk's results are yielded once, from the call that returned them,
so nothing is committed twice. `execution.retries` bounds the losses of one engine in one run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from legival_core.lifecycle.cancel import Cancelled, cancel_requested, on_cancel, raise_if_cancelled
from legival_core.run_config import Execution
from legival_core.stages.base import Work, engine_for
from legival_core.stages.isolation import isolated
from tasks.local_ray import LocalHead, start_head

os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
"""Ray's public calls start or join a Ray by themselves when none is connected ("auto-init"): a stray
call after a run stopped Ray (a shard thread still unwinding from a cancel) would start a NEW local
Ray, forked from this process, that nothing ever stops. Off: such a call fails instead (`_no_auto_init`
does the same when Ray was imported before this module)."""

log = logging.getLogger("legival.orchestration")


@dataclass(slots=True)
class ChunkDone:
    results: list[Any]
    engine: int
    node_id: str


class WorkerActor:
    """The actor body (wrapped with `ray.remote` by the pool): one worker state, built lazily."""

    def __init__(self, work: Work[Any, Any, Any], index: int) -> None:
        self.work, self.index = work, index
        self.state: Any = None
        self.built = False
        self.order: list[str] = []

    def _state(self) -> Any:
        if not self.built:
            self.state, self.built = self.work.setup(), True
        return self.state

    def process(self, chunk: Sequence[Any]) -> ChunkDone:
        import ray

        results = self.work.process(self._state(), chunk)
        if self.work.route is not None:
            self.order.extend(self.work.route(u) for u in chunk)
        return ChunkDone(results, self.index, ray.get_runtime_context().get_node_id())

    def warm(self) -> bool:
        """Build the worker now (the pool's `prewarm`), so the first chunk does not wait for it."""
        state = self._state()
        if self.work.warm is not None:
            self.work.warm(state)
        return True

    def history(self) -> list[str]:
        """Route keys in the order this engine processed them (for the routing test)."""
        return list(self.order)

    def loaded(self) -> bool:
        return bool(self.built and (self.work.loaded is None or self.work.loaded(self.state)))

    def close(self) -> None:
        if self.built and self.work.teardown is not None:
            self.work.teardown(self.state)


@dataclass(slots=True)
class _Chunk:
    """One actor call of a run: its engine, its position in that engine's order, its units."""

    engine: int
    index: int
    units: Sequence[Any]


@dataclass
class EnginePool:
    """Actors for one `work.key`; `run` is the `Executor` interface."""

    execution: Execution
    actors: list[Any] = field(default_factory=list)
    warming: list[Any] = field(default_factory=list)
    nodes: dict[int, set[str]] = field(default_factory=dict)
    replaced: int = 0
    """Engines recreated after a loss (by any run of this pool)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def n_engines(self) -> int:
        return self.execution.max_concurrent_engines

    def _new_actor(self, work: Work[Any, Any, Any], index: int) -> Any:
        import ray

        options: dict[str, Any] = {"num_cpus": self.execution.cpus_per_engine,
                                   "num_gpus": self.execution.gpus_per_engine,
                                   "max_concurrency": 1, "max_restarts": 0}
        if self.execution.engine_labels:
            # preferred, not required: with no live node carrying the labels (e.g. that node died),
            # the empty fallback selector places the engine on any node with room
            options["label_selector"] = dict(self.execution.engine_labels)
            options["fallback_strategy"] = [{"label_selector": {}}]
        return ray.remote(WorkerActor).options(**options).remote(work, index)

    def _ensure_actors(self, work: Work[Any, Any, Any]) -> list[Any]:
        raise_if_cancelled(f"starting the engines of {work.key or 'the work'}")
        if not self.actors:
            ensure_ray(self.execution)  # outside the lock: it waits for the Ray owner thread
        with self._lock:
            if not self.actors:
                self.actors = [self._new_actor(work, i) for i in range(self.n_engines)]
            actors = list(self.actors)
        if cancel_requested():  # the cancel came while Ray or the engines started: none of them is kept
            self.reset()
            raise_if_cancelled(f"starting the engines of {work.key or 'the work'}")
        return actors

    def _replace(self, work: Work[Any, Any, Any], engine: int, dead: Any, error: BaseException) -> Any:
        """The live actor of `engine`: a new one if `dead` is still in the pool (another shard may
        have replaced it already, or a failed run reset the pool)."""
        import ray

        with self._lock:
            if not self.actors:
                self.actors = [self._new_actor(work, i) for i in range(self.n_engines)]
            elif self.actors[engine] is dead:
                with contextlib.suppress(Exception):  # dead already, or cut off from its results
                    ray.kill(dead)
                self.actors[engine] = self._new_actor(work, engine)
                self.replaced += 1
                log.warning("engine %d of %s lost (%s); recreated", engine, work.key or "work", type(error).__name__)
            return self.actors[engine]

    def prewarm(self, work: Work[Any, Any, Any]) -> None:
        """Start Ray and the engines and build their workers in the background (on the Ray owner
        thread), so that this overlaps the driver's work. Calls queued on an actor run in order, so
        a chunk submitted later simply starts after its engine's `warm`."""

        def start() -> None:
            try:
                self.warming = [a.warm.remote() for a in self._ensure_actors(work)]
            except Cancelled:  # the run is stopping: nothing to warm
                return
            except Exception as e:  # noqa: BLE001  (the shards start the engines again and report errors)
                log.warning("engine prewarm failed: %s: %s", type(e).__name__, e)

        on_ray_owner_thread(start, wait=False)

    def route(self, work: Work[Any, Any, Any], units: Sequence[Any]) -> list[list[list[Any]]]:
        """Per engine, its chunks in submission order (units keep the plan's stable order)."""
        per_engine: list[list[Any]] = [[] for _ in range(self.n_engines)]
        for i, unit in enumerate(units):
            key = work.route(unit) if work.route is not None else str(i)
            per_engine[engine_for(key, self.n_engines)].append(unit)
        size = max(1, work.chunk_size)
        return [[us[i : i + size] for i in range(0, len(us), size)] for us in per_engine]

    def run(self, work: Work[Any, Any, Any], units: Sequence[Any]) -> Iterator[list[Any]]:
        """Submit every chunk, then yield finished chunks' results as they arrive (`ray.wait`), so
        the driver commits while the engines keep working. A lost engine's unreturned chunks go to
        a recreated engine (module docstring)."""
        import ray

        if not units:
            return
        actors = self._ensure_actors(work)
        chunks = [[_Chunk(e, i, c) for i, c in enumerate(cs)] for e, cs in enumerate(self.route(work, units))]
        calls: dict[Any, tuple[_Chunk, Any]] = {}  # ref -> (chunk, the actor it was submitted to)

        def submit(chunk: _Chunk, actor: Any) -> Any:
            ref = actor.process.remote(chunk.units)
            calls[ref] = (chunk, actor)
            return ref

        pending = []
        # interleave engines so that every engine starts at once
        for i in range(max((len(c) for c in chunks), default=0)):
            for e, cs in enumerate(chunks):
                if i < len(cs):
                    pending.append(submit(cs[i], actors[e]))
        returned: set[tuple[int, int]] = set()
        losses = [0] * self.n_engines
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=CANCEL_POLL_S)
                if not ready:  # nothing back yet: a cancel drops what the engines hold (they may hang)
                    if cancel_requested():
                        self.reset()
                        raise_if_cancelled(f"the chunks in flight on the engines of {work.key or 'the work'}")
                    continue
                if pending:  # commit every chunk that is ready in one transaction
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    ready += more
                results: list[Any] = []
                lost: dict[int, tuple[Any, BaseException]] = {}
                for ref in ready:
                    chunk, actor = calls.pop(ref)
                    try:
                        done = ray.get(ref)
                    except Exception as err:
                        if not _actor_died(err):
                            raise
                        lost.setdefault(chunk.engine, (actor, err))
                        continue
                    returned.add((chunk.engine, chunk.index))
                    self.nodes.setdefault(done.engine, set()).add(done.node_id)
                    results += done.results
                if results:  # committed before any lost chunk is resubmitted (or the run fails)
                    yield results
                if lost:  # the engines a cancel killed: what they held is dropped, nothing replaced
                    raise_if_cancelled(f"replacing lost engines of {work.key or 'the work'}")
                for eng, (dead, error) in lost.items():
                    losses[eng] += 1
                    if losses[eng] > self.execution.retries:
                        raise error
                    actor = self._replace(work, eng, dead, error)
                    # the engine's calls on a lost actor are abandoned (never yielded), and every
                    # chunk of it not returned yet goes to the live actor, in order
                    for r in [r for r in pending if calls[r][0].engine == eng and calls[r][1] is not actor]:
                        del calls[r]
                    pending = [r for r in pending if r in calls]
                    live = {calls[r][0].index for r in pending if calls[r][0].engine == eng}
                    pending += [submit(c, actor) for c in chunks[eng]
                                if (eng, c.index) not in returned and c.index not in live]
        except BaseException as e:
            for ref in pending:
                with contextlib.suppress(Exception):  # a call on an actor that is gone
                    ray.cancel(ref)
            if _actor_died(e):
                self.reset()
            raise

    def reset(self) -> None:
        import ray

        with self._lock:
            for a in self.actors:
                with contextlib.suppress(Exception):  # an actor gone already, or Ray disconnected
                    ray.kill(a)
            self.actors = []

    def histories(self) -> list[list[str]]:
        import ray

        return ray.get([a.history.remote() for a in self.actors]) if self.actors else []

    def loaded_engines(self) -> int:
        import ray

        return sum(ray.get([a.loaded.remote() for a in self.actors])) if self.actors else 0


class RayExecutor:
    """The `Executor` for Ray: one pool per `work.key`, reused by every run in this process."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution

    def run(self, work: Work[Any, Any, Any], units: Sequence[Any]) -> Iterator[list[Any]]:
        work = isolated(work)  # a unit that raises fails alone (legival_core.stages.isolation)
        return get_pool(work, self.execution).run(work, units)

    def prewarm(self, work: Work[Any, Any, Any]) -> None:
        work = isolated(work)  # the actors keep the work they were built with: the same as `run`'s
        get_pool(work, self.execution).prewarm(work)


_pools: dict[str, EnginePool] = {}
_pools_lock = threading.Lock()
_started_ray = False
_local_head: LocalHead | None = None
_ray_owner: ThreadPoolExecutor | None = None
_ray_owner_lock = threading.Lock()
_OWNER_PREFIX = "legival-ray-owner"


def on_ray_owner_thread(fn: Callable[[], Any], wait: bool = True) -> Any:
    """Run `fn` on the one long-lived thread that starts and stops Ray in this process.

    Shard tasks run on Prefect's worker threads, so the first of them would call `ray.init()`; a
    later `ray.shutdown()` on another thread (the flow's) then waits ~15 s in the driver's core-worker
    shutdown (Ray 2.60, measured: 15.1 s vs 1.4 s when the same thread does both). Doing both on one
    owner thread keeps the lazy start (no Ray at all when nothing is missing) without that cost.
    Called on the owner thread itself, `fn` runs at once; `wait=False` queues it and returns."""
    global _ray_owner
    if threading.current_thread().name.startswith(_OWNER_PREFIX):
        return fn()
    with _ray_owner_lock:
        if _ray_owner is None:
            _ray_owner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_OWNER_PREFIX)
        owner = _ray_owner
    future = owner.submit(fn)
    return future.result() if wait else None


def get_pool(work: Work[Any, Any, Any], execution: Execution) -> EnginePool:
    """One pool per `work.key` for the life of the flow run, shared by its shard tasks."""
    with _pools_lock:
        pool = _pools.get(work.key)
        if pool is None:
            pool = _pools[work.key] = EnginePool(execution)
        return pool


def release_pool(key: str) -> None:
    """Kill the engines of one pool (a stage done with its model), so that its GPUs serve the next
    model; Ray stays up for the other pools."""
    with _pools_lock:
        pool = _pools.pop(key, None)
    if pool is not None and pool.actors:
        pool.reset()


def loaded_engines() -> int:
    return sum(p.loaded_engines() for p in _pools.values())


def drop_engines() -> None:
    """A cancel: kill every engine now, so that the chunks they hold are dropped at once (a chunk can
    take minutes) and their shard tasks reach the cancel (`EnginePool.run`); Ray stays connected for
    the driver's own shutdown (`shutdown_pools`, at the flow's end)."""
    import sys

    if "ray" not in sys.modules:
        return
    with _pools_lock:
        pools = list(_pools.values())
    for p in pools:
        p.reset()


on_cancel(drop_engines)


def shutdown_pools() -> None:
    """Kill the engines; stop Ray only if this process started it."""
    global _started_ray
    with _pools_lock:
        for p in _pools.values():
            if p.actors:
                p.reset()
        _pools.clear()
    if _started_ray:
        on_ray_owner_thread(_stop_ray)
        _started_ray = False


def _stop_ray() -> None:
    """Disconnect, then stop the local Ray's helper (when this process started one)."""
    global _local_head
    import ray

    with python_keeps_sigterm():  # Ray's core puts SIGTERM back to its default as it shuts down
        ray.shutdown()
    head, _local_head = _local_head, None
    if head is not None:
        head.stop()


def ensure_ray(execution: Execution) -> None:
    on_ray_owner_thread(lambda: _init_ray(execution))


def _init_ray(execution: Execution) -> None:
    global _started_ray
    import ray

    _no_auto_init()
    if ray.is_initialized():
        return
    raise_if_cancelled("starting Ray")  # never a new Ray after a cancel
    with python_keeps_sigterm():
        _start_ray(execution)
    _started_ray = True


@contextmanager
def python_keeps_sigterm() -> Iterator[None]:
    """Ray's C++ core installs abseil's failure-signal handler, which takes SIGTERM from Python and
    aborts the process (exit -6 and a stack dump), and its shutdown leaves SIGTERM at its default (the
    process then dies at once, exit -15, cleaning nothing): a cancel from Prefect or a scheduler must reach
    the Python handlers instead (legival/lifecycle/cancel.py, Prefect's SIGTERM bridge). The process-wide
    disposition is saved before and put back after, with `sigaction` (Python's `signal.signal` works
    on the main thread only, and Ray starts on its owner thread). Linux only; elsewhere nothing."""
    import ctypes
    import ctypes.util
    import signal as sig

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        saved = ctypes.create_string_buffer(512)  # larger than any libc's struct sigaction
        ok = libc.sigaction(int(sig.SIGTERM), None, saved) == 0
    except (OSError, AttributeError):
        ok = False
    try:
        yield
    finally:
        if ok:
            libc.sigaction(int(sig.SIGTERM), saved, None)


def _start_ray(execution: Execution) -> None:
    global _local_head
    import ray

    if execution.ray_address == "local":
        # Ray starts workers at niceness 15 by default; here the engines ARE the work, so they must not
        # yield the CPU to every other process on a shared machine.
        os.environ.setdefault("RAY_worker_niceness", "0")
        # Always a new local Ray (never a cluster that happens to run on this machine: `ray start`,
        # another test's nodes), started by a helper process, never forked from this one (tasks/local_ray.py).
        head = start_head(execution.local_cpus)
        try:
            ray.init(address=head.address, log_to_driver=False)
        except BaseException:
            head.stop()
            raise
        _local_head = head
        log.info("local Ray at %s, started by helper process %s (tasks/local_ray.py)", head.address,
                 head.process.pid)
    else:
        from tasks.infra import check_ray

        check_ray(execution.ray_address, execution.connect_timeout_s)  # seconds, not Ray's ~150 s of retries
        ray.init(address=execution.ray_address, log_to_driver=False)


def _no_auto_init() -> None:
    """Ray's auto-init off in this process even when Ray was imported before this module (its
    module reads the environment once): see RAY_ENABLE_AUTO_CONNECT above."""
    with contextlib.suppress(ImportError, AttributeError):
        import ray._private.auto_init_hook as hook

        hook.enable_auto_connect = False


CANCEL_POLL_S = 0.5
"""Seconds between two looks at the cancel flag while the engines compute (a hung engine never answers)."""

TRANSIENT = (ConnectionError, TimeoutError)


def _actor_died(e: BaseException) -> bool:
    from ray import exceptions as rex

    return isinstance(e, rex.RayActorError | rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError)


def is_transient(e: BaseException) -> bool:
    """Worth a retry: a lost engine, node or object, or a network error inside an engine; never once
    a cancel was requested (the cancel killed the engines: nothing is retried)."""
    from ray import exceptions as rex

    if cancel_requested() or isinstance(e, Cancelled):
        return False
    if _actor_died(e) or isinstance(e, rex.GetTimeoutError | rex.RaySystemError | rex.OutOfMemoryError):
        return True
    if isinstance(e, rex.RayTaskError):
        return isinstance(e.cause, TRANSIENT)
    return isinstance(e, TRANSIENT)
