"""The judge's records and errors: what goes in (`JudgeRequest`), what comes out (`JudgeResult`), the
`Judge` protocol every judge satisfies, and the errors a judge raises (scrubbed of secrets; the
transient/permanent classification is `llm.errors`').

Nothing here talks to a server: `base.py` holds the loop every judge shares, `gemini.py` and
`openai_compat.py` the judges (the latter on `llm.transport`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from legival_core.llm.errors import LLMError

JudgeStatus = Literal["ok", "failed", "overflow"]
ProgressFn = Callable[[int], None]

BATCH_POLL_INTERVAL_S = 30.0
"""Seconds between two polls of a batch job (`--poll-interval`)."""


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """One trace to judge. `steps` are the SPEC section 1 sentences; the judge numbers them from 1."""

    trace_id: str
    dataset: str
    question: str
    steps: tuple[str, ...]

    @property
    def m(self) -> int:
        return len(self.steps)


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """The judge's verdict on one trace.

    `flagged_steps` are distinct, sorted and inside 1..m. `raw_json` is the reply text the verdict was
    read from (for a windowed trace: a JSON list of {first, last, reply}); it is kept for storage and
    re-scoring. Token counts are as reported by the server (0 when it reports none) and include every
    attempt, repair and window. `transient`: a `failed` result that a later call could turn out
    otherwise (the endpoint could not be reached, or kept answering 429/5xx past the retries): it is
    not stored, so the trace stays to do (docs/judge.md "Which failures are stored").
    """

    trace_id: str
    status: JudgeStatus
    flagged_steps: tuple[int, ...] = ()
    backtracking_detected: bool | None = None
    confidence: float | None = None
    final_answer: str | None = None
    raw_json: str = ""
    reason: str = ""
    dropped_out_of_range: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    repaired: bool = False
    windows: int = 1
    transient: bool = False


def backtracking_fraction(result: JudgeResult, m: int) -> float | None:
    """SPEC section 3: |distinct flagged step numbers in 1..m| / m; None when not `ok` or m == 0."""
    if result.status != "ok" or m <= 0:
        return None
    return len({s for s in result.flagged_steps if 1 <= s <= m}) / m


@runtime_checkable
class Judge(Protocol):
    name: str
    model: str
    prompt_version: str

    def cache_key_params(self) -> dict[str, Any]: ...

    def judge_many(
        self, requests: Sequence[JudgeRequest], progress: ProgressFn | None = None
    ) -> list[JudgeResult]: ...



@dataclass(frozen=True, slots=True)
class BatchStatus:
    """A batch job's state as the provider reports it."""

    name: str
    state: str
    done: bool
    succeeded: bool


@runtime_checkable
class BatchJudge(Judge, Protocol):
    """A judge with a provider batch API (`JudgeInfo.batch`): submit a job, poll it, collect it.
    `build_batch_requests` returns the provider's requests and the results known without a call
    (empty traces, traces over the budget)."""

    def build_batch_requests(self, requests: Sequence[JudgeRequest]) -> tuple[list[Any], list[JudgeResult]]: ...

    def submit_batch(self, requests: Sequence[JudgeRequest], display_name: str = ...) -> str: ...

    def poll_batch(self, name: str) -> BatchStatus: ...

    def wait_batch(self, name: str, interval_s: float = ...) -> BatchStatus: ...

    def collect_batch(self, name: str, requests: Sequence[JudgeRequest] | None = None) -> list[JudgeResult]: ...

# ---------------------------------------------------------------------------------------------- errors

JudgeError = LLMError
"""Any judge failure surfaced to a caller (scrubbed of secrets): the judges' name for `llm.errors.LLMError`,
so the transport's `TransientError` / `ConnectionFailed` / `PermanentError` are judge errors too."""


class MissingAPIKey(JudgeError):
    """No API key was configured."""
