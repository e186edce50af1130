"""Per-unit fault isolation, the same for every stage: every executor runs `isolated(work)`.

A unit (a trace, a rollout chunk's trace, a judge window, a quality record) whose computation raises
or exceeds its time limit fails alone: its chunk is rerun unit by unit, each unit that fails again
becomes a `UnitFailure` (its key and the reason) instead of results, and everything else is computed
and committed as usual. `run_stage` stores the failures (`legival_core.store.failures`), skips them
on the next run unless asked to retry (`--retry-failed`) or the producing code's version changed,
and counts them in the command's summary.

Not every exception is a unit's fault. What the machine or a service does to every unit alike (out
of memory, a connection lost, a file system error) is raised, as before: the run stops and a rerun
resumes. And when units keep failing one after the other (`MAX_FAILED_IN_A_ROW`), the worker itself
is broken (a model that cannot run): that is raised too, rather than marking every trace failed.

Time limits: in-process, on the main thread (a CLI command), an interval timer interrupts a unit
that runs past its limit (Python code only: a C call returns first). `ProcessExecutor` with a
`Work.isolate` enforces hard limits in separate processes (the Z3 checks). Prefect task threads and
Ray actors get the exception isolation but no soft timer.
"""

from __future__ import annotations

import contextvars
import hashlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from legival_core.crashlog import summarize
from legival_core.llm.errors import EndpointRefused, TransientError
from legival_core.llm.retry import GaveUp
from legival_core.run_config import Execution, default_of

MAX_FAILED_IN_A_ROW = 3
"""Units failing alone one after the other, with no success between: past this the worker is broken."""

SYSTEMIC: tuple[type[BaseException], ...] = (MemoryError, OSError, ConnectionError)
"""Exceptions that are the machine's or a service's, not a unit's: raised, never stored as a failure."""


@dataclass(frozen=True, slots=True)
class UnitFailure:
    """What a unit that failed alone yields instead of its results."""

    unit_key: str
    trace_id: str | None
    reason: str
    teacher: str | None = None
    dataset: str | None = None
    """For a unit that is not (yet) a stored trace (a record skipped at ingest): where it belongs."""


class UnitTimeout(Exception):
    """A unit ran past its time limit (raised by the interval timer)."""


@dataclass
class Isolation:
    """The run's settings: `unit_timeout_s` (the spec's `execution.unit_timeout_s`) and whether
    stored failures are retried; `ledger` collects what every stage of the command did."""

    unit_timeout_s: float | None = None
    retry_failed: bool = False
    ledger: list[StageFailures] = field(default_factory=list)


@dataclass
class StageFailures:
    stage: str
    attempted: int = 0
    failed: list[UnitFailure] = field(default_factory=list)
    skipped: int = 0
    """Units left out because they failed before (same code version, no `--retry-failed`)."""


_SETTINGS: contextvars.ContextVar[Isolation | None] = contextvars.ContextVar("legival_isolation", default=None)
_DEFAULT = Isolation(unit_timeout_s=default_of(Execution, "unit_timeout_s"))


def current() -> Isolation:
    """The settings of the command or flow run in progress; outside any, the defaults, whose ledger
    stays empty (nobody would read it)."""
    return _SETTINGS.get() or Isolation(unit_timeout_s=_DEFAULT.unit_timeout_s)


@contextmanager
def isolation(settings: Isolation) -> Iterator[Isolation]:
    """Run the block's stages with these settings (a CLI command, a flow run)."""
    token = _SETTINGS.set(settings)
    try:
        yield settings
    finally:
        _SETTINGS.reset(token)


def unit_trace(unit: Any) -> str | None:
    """The trace a unit is about, when it names one (most units are one trace)."""
    for cand in (unit, getattr(unit, "trace", None), getattr(getattr(unit, "parsed", None), "trace", None),
                 unit[0] if isinstance(unit, tuple) and unit else None):
        if isinstance(cand, dict):
            cand = cand.get("trace_id")
        else:
            cand = getattr(cand, "trace_id", cand if isinstance(unit, tuple) and cand is unit[0] else None)
        if isinstance(cand, str):
            return cand
    return None


def unit_key(unit: Any) -> str:
    """A unit's identity within its stage (`failure_stage`): its own key when it has one (a generation
    job, a monitor item), else the trace it is about, else a hash of what it holds. Stable from one
    run to the next, whatever else the store gained meanwhile (cached embeddings, other rollouts)."""
    own = unit.get("item_key") if isinstance(unit, dict) else getattr(unit, "key", None)
    if isinstance(own, str) and own:
        return own
    trace = unit_trace(unit)
    if trace is not None:
        return trace
    return "h:" + hashlib.sha256(repr(unit).encode("utf-8", "backslashreplace")).hexdigest()[:32]


def failure_stage(stage: Any) -> str:
    """The stage's name in `unit_failures`, with its scope when one stage runs per group, student,
    reward model or supervisor (`unit_scope`): a trace failing the Z3 check is not failing clarity."""
    scope = getattr(stage, "unit_scope", "")
    return f"{stage.name}:{scope}" if scope else str(stage.name)


def reason_of(e: BaseException) -> str:
    """The stored reason: `Type: message` on one line, secrets of the environment replaced by their
    names (a reason reaches the store and the reports), cut to 500 characters."""
    return summarize(e, 500)


@dataclass(frozen=True)
class Isolated:
    """`Work.process` wrapped: a chunk that raises is rerun unit by unit; units that fail alone become
    `UnitFailure`s. Picklable (a frozen dataclass of module-level callables) for processes and Ray."""

    process: Callable[[Any, Sequence[Any]], list[Any]]
    unit_timeout_s: float | None

    def __call__(self, worker: Any, chunk: Sequence[Any]) -> list[Any]:
        try:
            with _time_limit(None if self.unit_timeout_s is None else self.unit_timeout_s * len(chunk)):
                return self.process(worker, chunk)
        except Exception as e:
            if systemic(e):
                raise
            if len(chunk) == 1:
                return [_failure(chunk[0], e)]
        out: list[Any] = []
        in_a_row = 0
        for unit in chunk:
            try:
                with _time_limit(self.unit_timeout_s):
                    out += self.process(worker, [unit])
                in_a_row = 0
            except Exception as e:
                if systemic(e):
                    raise
                in_a_row += 1
                if in_a_row >= MAX_FAILED_IN_A_ROW and not any(not isinstance(r, UnitFailure) for r in out):
                    raise RuntimeError(f"{MAX_FAILED_IN_A_ROW} units in a row failed alone, none succeeded "
                                       f"({reason_of(e)}): the worker cannot run; nothing was stored for them") from e
                out.append(_failure(unit, e))
        return out


def systemic(e: BaseException) -> bool:
    """The machine's or a service's error (`SYSTEMIC`, or a model call that a later call could turn
    out otherwise: `llm.errors.TransientError`, `llm.retry.GaveUp`, `llm.errors.EndpointRefused`), not the unit's: never stored as
    the unit's failure, so the unit stays to do (docs/CLI.md "Failure contract": transient failures
    stay to do, permanent ones are retried on request). A `TimeoutError` (an OSError subclass) is the
    unit's: a time limit its own computation hit (NLTK's regex limit, a solver's)."""
    if isinstance(e, TransientError | GaveUp | EndpointRefused):
        return True
    return isinstance(e, SYSTEMIC) and not isinstance(e, TimeoutError)


def _failure(unit: Any, e: BaseException) -> UnitFailure:
    return UnitFailure(unit_key(unit), unit_trace(unit), reason_of(e))


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `UnitTimeout` in the block after `seconds`, on the main thread of a Unix process only
    (elsewhere, and when a timer is already set by someone else, no limit)."""
    if (seconds is None or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer") or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def expire(_sig: int, _frame: Any) -> None:
        raise UnitTimeout(f"exceeded its time limit of {seconds:g} s (execution.unit_timeout_s)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def isolated(work: Any) -> Any:
    """The `Work` with its `process` isolated (`Isolated`), once: what every executor runs (the
    in-process and process executors here, the Ray pool in `tasks/`). The limit is the current run's
    `unit_timeout_s` (`isolation`), read here in the caller's thread."""
    if isinstance(work.process, Isolated):
        return work
    return replace(work, process=Isolated(work.process, current().unit_timeout_s))


def split_failures(batch: Sequence[Any]) -> tuple[list[Any], list[UnitFailure]]:
    results = [r for r in batch if not isinstance(r, UnitFailure)]
    return results, [r for r in batch if isinstance(r, UnitFailure)]
