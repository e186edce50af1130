"""Which failures are known conditions, and which are bugs: one classification for every command, the
run and the Prefect deployments (../shared/CLI.md "Failure contract").

- **Input errors** (`input_error`): a spec, a trace file, a store or a plugin the user must fix. Their
  message says what to fix. A command exits 2 with it; a run that meets one stops (nothing more can be
  computed from a bad input) and says so in one line.
- **Service failures** (`service_failure`): an outside service said no (a key refused, a quota spent,
  an endpoint that cannot be reached, a model server that keeps failing, a cost limit). Not a bug, and
  not the traces' fault: a run marks the stage failed with the reason (the report's coverage shows it),
  computes every stage that does not need it, writes the report and exits 2.
- Anything else is a bug: one line with the path of its crash log, exit 1 (`crashlog.crash_message`).

Known conditions never write a crash log and never show a traceback.
"""

from __future__ import annotations

from typing import Any

from legival_core.crashlog import causes, summarize
from legival_core.llm.cost import CostLimitExceeded
from legival_core.llm.errors import LLMError
from legival_core.readers.trace_records import IngestError
from legival_core.registry import PluginError
from legival_core.run_config import SpecError
from legival_core.store import StoreError


class StageFailed(RuntimeError):
    """A stage (or one of its jobs) failed as a whole for a known reason outside Legi-Val (module
    docstring): `stage` is its registered name, the message the reason, already free of secrets."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.reason = stage, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stage, self.reason))


class JobsFailed(StageFailed):
    """Jobs of one stage failed for known outside reasons (`reasons`: job label -> reason); `results`
    holds what the stage's other jobs returned. Raised after every job of the stage has run."""

    def __init__(self, stage: str, reasons: dict[str, str], results: list[Any]) -> None:
        super().__init__(stage, "; ".join(r if len(reasons) == 1 else f"{job}: {r}" for job, r in reasons.items()))
        self.reasons, self.results = reasons, results

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stage, self.reasons, self.results))


class StagesFailed(StageFailed):
    """A run went to its end with stages that failed as a whole (`failed`: stage -> reason) and the
    stages that needed them not run (`not_run`: stage -> why); `summary` is the run's summary, the
    report included. The run's last word: a command prints the summary, then this line, exit 2."""

    def __init__(self, failed: dict[str, str], not_run: dict[str, str], summary: dict[str, Any]) -> None:
        what = "; ".join(f"{stage}: {why}" for stage, why in failed.items())
        skipped = f"; not run: {', '.join(not_run)} (they need a failed stage)" if not_run else ""
        super().__init__(",".join(failed), f"{len(failed)} stage(s) failed: {what}{skipped}")
        self.failed, self.not_run, self.summary = failed, not_run, summary

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.failed, self.not_run, self.summary))


INPUT_ERRORS: tuple[type[BaseException], ...] = (PluginError, StoreError, SpecError, IngestError)
SERVICE_ERRORS: tuple[type[BaseException], ...] = (StageFailed, LLMError, CostLimitExceeded)


def input_error(e: BaseException) -> BaseException | None:
    """The user's bad input in the chain of causes of `e`, if any."""
    return next((c for c in causes(e) if isinstance(c, INPUT_ERRORS)), None)


def service_failure(e: BaseException) -> BaseException | None:
    """The outside service's refusal in the chain of causes of `e`, if any (an input error first:
    a bad spec that also made a call fail is the spec's)."""
    if input_error(e) is not None:
        return None
    for c in causes(e):
        if isinstance(c, SERVICE_ERRORS) or _is_http_error(c):
            return c
    return None


def known_failure(e: BaseException) -> BaseException | None:
    """An input error or a service failure in the chain of causes of `e` (never a bug)."""
    return input_error(e) or service_failure(e)


def reason(e: BaseException, limit: int = 300) -> str:
    """One line for the user: the message alone when it is a known condition's (its words are written
    for the user), `Type: message` otherwise; secrets of the environment redacted."""
    line = summarize(e, limit)
    if isinstance(e, (*INPUT_ERRORS, StageFailed)) and str(e).strip():
        line = line.split(": ", 1)[1] if ": " in line else line
    return line


def _is_http_error(e: BaseException) -> bool:
    """httpx's errors (a teacher's chat endpoint raises them after its retries) without importing httpx
    where nothing used it."""
    return type(e).__module__.split(".")[0] == "httpx" and isinstance(e, Exception)
