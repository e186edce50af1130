"""The backtracking-judge interface and the loop every judge shares (SPEC section 3).

A judge reads the numbered steps of one trace and returns the step numbers it flags as backtracking;
the metric is |distinct flagged step numbers in 1..m| / m (`backtracking_fraction`). This module holds
everything that does not depend on the wire protocol: request/result records, reply validation, the
retry/backoff loop, the single repair re-ask, windowing of over-long traces, and concurrent fan-out.
A concrete judge (gemini.py, openai_compat.py) implements only `_send`: one HTTP call, mapping its
errors to `TransientError` (retried) or `PermanentError` (not retried).

Outcomes, never silent zeros:
- `ok`: a valid reply; out-of-range step numbers are dropped and counted in `dropped_out_of_range`.
- `failed`: the call failed after retries, or the reply was invalid twice (the original and ONE repair
  re-ask that shows the model its bad reply, the problem found, and the schema). `reason` says why.
  `backtracking_fraction` is None for it: a failed judgement is missing data, not "no backtracking".
- `overflow`: the prompt exceeds `WindowPolicy.max_prompt_tokens` and splitting is off (or one single
  step is already over the budget).

Long traces: with `WindowPolicy.split=True` (default) the steps are cut into consecutive,
non-overlapping windows that each fit the budget. Each window is judged with the ORIGINAL step
numbers and told it is an excerpt; the merged result flags the union of the windows' steps,
`backtracking_detected` is true if any window says so, `confidence` is the minimum, `final_answer`
comes from the last window, and retries/tokens/dropped counts are summed. If any window fails the
trace fails. A backtrack whose antecedent lies in an earlier window is judged without that context;
the budget default (200k estimated tokens, ~5x the longest traces we generate) makes this rare.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from legival_core.judges.cost import DEFAULT_PRICES, Prices, guard_cost
from legival_core.judges.prompt import PROMPT_VERSION, repair_prompt, system_prompt, user_prompt
from legival_core.judges.ratelimit import RateLimiter, backoff_delay

log = logging.getLogger("legival_core.judges")

JudgeStatus = Literal["ok", "failed", "overflow"]
Role = Literal["user", "assistant"]
Turn = tuple[Role, str]
ProgressFn = Callable[[int], None]

RETRYABLE_HTTP_STATUS: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})


# --------------------------------------------------------------------------------------------- records


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
    attempt, repair and window.
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


# ---------------------------------------------------------------------------------------------- errors


_URL_KEY = re.compile(r"(?i)((?:api[_-]?)?key=)[^&\s'\"]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]+")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets from a message: the given strings, `key=...` query values and bearer tokens."""
    out = text
    for s in secrets:
        if s:
            out = out.replace(s, "[REDACTED]")
    out = _URL_KEY.sub(r"\1[REDACTED]", out)
    return _BEARER.sub(r"\1[REDACTED]", out)


class JudgeError(RuntimeError):
    """Any judge failure surfaced to a caller; its message has been scrubbed of secrets."""


class TransientError(JudgeError):
    """A failure worth retrying (429, 5xx, 408, timeouts, dropped connections)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(JudgeError):
    """A failure that a retry cannot fix (400, 401, 403, 404, ...)."""


class MissingAPIKey(JudgeError):
    """No API key was configured."""


class Secret:
    """A string that never shows itself in repr()/str()."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('[REDACTED]')"

    __str__ = __repr__


# ------------------------------------------------------------------------------------ reply validation


class ReplyInvalid(ValueError):
    """The reply is not JSON, or breaks the schema; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A validated reply, with the step numbers already restricted to the range shown to the judge."""

    backtracking_detected: bool
    final_answer: str
    steps: tuple[int, ...]
    dropped: int
    confidence: float
    overall_reasoning: str


_REQUIRED = ("backtracking_detected", "final_answer", "backtracking_steps", "confidence", "overall_reasoning")


def extract_json_text(text: str) -> str:
    """Strip a markdown fence and surrounding prose, as the paper's `_extract_json_text` does."""
    content = text.strip()
    if "```json" in content:
        content = content.split("```json", 1)[1].split("```", 1)[0].strip()
    elif content.startswith("```"):
        parts = content.split("```", 2)
        if len(parts) >= 2:
            content = parts[1].strip()
    start, end = content.find("{"), content.rfind("}")
    if start != -1 and end > start:
        return content[start : end + 1]
    return content


def parse_judgement(text: str | None, first: int, last: int) -> Judgement:
    """Validate a reply against the paper's schema; keep step numbers in first..last, count the rest.

    Strict on types (an int must be an int, a bool a bool), on confidence in [0, 1], and on the
    paper's constraint that `backtracking_steps` is empty iff `backtracking_detected` is false:
    a reply breaking any of these is re-asked once, never guessed at.
    """
    if text is None or not text.strip():
        raise ReplyInvalid("empty reply")
    try:
        obj = json.loads(extract_json_text(text))
    except json.JSONDecodeError as e:
        raise ReplyInvalid(f"not valid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(obj, dict):
        raise ReplyInvalid(f"top level is {type(obj).__name__}, expected an object")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise ReplyInvalid(f"missing keys: {', '.join(missing)}")
    detected, final, items, conf, overall = (obj[k] for k in _REQUIRED)
    if not isinstance(detected, bool):
        raise ReplyInvalid("backtracking_detected must be a boolean")
    if not isinstance(final, str):
        raise ReplyInvalid("final_answer must be a string")
    if not isinstance(overall, str):
        raise ReplyInvalid("overall_reasoning must be a string")
    if isinstance(conf, bool) or not isinstance(conf, int | float) or not math.isfinite(conf):
        raise ReplyInvalid("confidence must be a number")
    if not 0.0 <= float(conf) <= 1.0:
        raise ReplyInvalid(f"confidence {conf} is outside [0, 1]")
    if not isinstance(items, list):
        raise ReplyInvalid("backtracking_steps must be an array")
    numbers: list[int] = []
    for i, it in enumerate(items):
        if not isinstance(it, dict) or "step_number" not in it or "reason" not in it:
            raise ReplyInvalid(f"backtracking_steps[{i}] must be an object with step_number and reason")
        n = it["step_number"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise ReplyInvalid(f"backtracking_steps[{i}].step_number must be an integer")
        if not isinstance(it["reason"], str):
            raise ReplyInvalid(f"backtracking_steps[{i}].reason must be a string")
        numbers.append(n)
    if not detected and numbers:
        raise ReplyInvalid("backtracking_steps must be [] when backtracking_detected is false")
    if detected and not numbers:
        raise ReplyInvalid("backtracking_detected is true but backtracking_steps is empty")
    distinct = set(numbers)
    kept = tuple(sorted(n for n in distinct if first <= n <= last))
    return Judgement(detected, final, kept, len(distinct) - len(kept), float(conf), overall)


# --------------------------------------------------------------------------------------------- windows


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How a trace whose prompt is over budget is handled. Token counts are estimated as chars / 4."""

    max_prompt_tokens: int = 200_000
    chars_per_token: float = 4.0
    split: bool = True

    def tokens(self, chars: int) -> int:
        return math.ceil(chars / self.chars_per_token)


@dataclass(frozen=True, slots=True)
class Window:
    first: int
    steps: tuple[str, ...]

    @property
    def last(self) -> int:
        return self.first + len(self.steps) - 1


@dataclass(frozen=True, slots=True)
class WindowPlan:
    windows: tuple[Window, ...]
    overflow_reason: str = ""


def plan_windows(
    request: JudgeRequest, system: str, policy: WindowPolicy, include_question: bool
) -> WindowPlan:
    """One window when the whole prompt fits; otherwise greedy consecutive windows, or overflow."""
    question = request.question if include_question else None
    m = request.m
    whole = len(system) + len(user_prompt(request.steps, first=1, m=m, question=question))
    if policy.tokens(whole) <= policy.max_prompt_tokens:
        return WindowPlan((Window(1, request.steps),))
    est = policy.tokens(whole)
    if not policy.split:
        return WindowPlan(
            (), f"prompt ~{est} tokens > budget {policy.max_prompt_tokens} (splitting disabled)"
        )
    # Fixed cost of a window: system + wrapper + excerpt note with the widest step numbers.
    overhead = len(system) + len(user_prompt(("",), first=m, m=m + 1, question=question))
    windows: list[Window] = []
    cur: list[str] = []
    cur_chars = overhead
    start = 1
    for k, s in enumerate(request.steps, start=1):
        line = len(f"[{k}] ") + len(" ".join(s.split())) + 1
        if policy.tokens(overhead + line) > policy.max_prompt_tokens:
            return WindowPlan((), f"step {k} alone is ~{policy.tokens(overhead + line)} tokens > budget")
        if cur and policy.tokens(cur_chars + line) > policy.max_prompt_tokens:
            windows.append(Window(start, tuple(cur)))
            cur, cur_chars, start = [], overhead, k
        cur.append(s)
        cur_chars += line
    if cur:
        windows.append(Window(start, tuple(cur)))
    return WindowPlan(tuple(windows))


# ---------------------------------------------------------------------------------------- shared loop


@dataclass(frozen=True, slots=True)
class Reply:
    """One model reply as the transport saw it."""

    text: str | None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JudgeLimits:
    """Operational settings: they never change a judgement, so they stay out of the cache key."""

    concurrency: int = 16
    rpm: float | None = None
    rpm_burst: int = 1
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_retry_after_s: float = 300.0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")


@dataclass(slots=True)
class _Tally:
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, r: Reply) -> None:
        self.input_tokens += r.input_tokens
        self.output_tokens += r.output_tokens


@dataclass(slots=True)
class WindowOutcome:
    window: Window
    judgement: Judgement | None
    raw: str
    reason: str = ""
    repaired: bool = False
    tally: _Tally = field(default_factory=_Tally)


class BaseJudge(ABC):
    """Retries, repair, validation, windowing and concurrency; subclasses implement `_send`."""

    name: ClassVar[str]
    prompt_version: str = PROMPT_VERSION

    def __init__(
        self,
        *,
        model: str,
        temperature: float,
        max_output_tokens: int | None,
        include_question: bool = False,
        limits: JudgeLimits | None = None,
        windows: WindowPolicy | None = None,
        max_cost_usd: float | None = None,
        prices: Prices | None = None,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.include_question = include_question
        self.limits = limits or JudgeLimits()
        self.window_policy = windows or WindowPolicy()
        self.max_cost_usd = max_cost_usd
        self.prices = prices or DEFAULT_PRICES
        self._limiter = RateLimiter(self.limits.rpm, self.limits.rpm_burst)
        self._sleep: Callable[[float], None] = time.sleep

    # -- to implement -------------------------------------------------------------------------------

    @abstractmethod
    def _send(self, system: str, turns: Sequence[Turn]) -> Reply:
        """One HTTP call; raise TransientError/PermanentError with scrubbed messages."""

    def _secrets(self) -> tuple[str, ...]:
        return ()

    # -- public ---------------------------------------------------------------------------------------

    def cache_key_params(self) -> dict[str, Any]:
        """The fields that change a judgement; never keys, endpoints, timeouts or concurrency."""
        return {
            "judge": self.name,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "include_question": self.include_question,
            "max_prompt_tokens": self.window_policy.max_prompt_tokens,
            "chars_per_token": self.window_policy.chars_per_token,
            "split": self.window_policy.split,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, temperature={self.temperature!r})"

    def scrub(self, text: str) -> str:
        return scrub(text, self._secrets())

    def judge_many(
        self, requests: Sequence[JudgeRequest], progress: ProgressFn | None = None
    ) -> list[JudgeResult]:
        """Judge every request concurrently (at most `limits.concurrency` in flight, `limits.rpm`
        calls per minute); results come back in request order. `progress` is called after each
        finished request with the number finished so far."""
        reqs = list(requests)
        for r in reqs:
            system_prompt(r.dataset)  # an unknown dataset fails here, before any paid call
        self._check_budget(reqs, batch=False)
        results: list[JudgeResult | None] = [None] * len(reqs)
        done = 0
        with ThreadPoolExecutor(max_workers=self.limits.concurrency, thread_name_prefix="judge") as ex:
            futures = {ex.submit(self._judge_one_safe, r): i for i, r in enumerate(reqs)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                done += 1
                if progress is not None:
                    progress(done)
        return [r for r in results if r is not None]

    def judge(self, request: JudgeRequest) -> JudgeResult:
        return self.judge_many([request])[0]

    # -- internals ------------------------------------------------------------------------------------

    def _check_budget(self, reqs: Sequence[JudgeRequest], *, batch: bool) -> None:
        if self.max_cost_usd is None:
            return
        guard_cost(
            reqs,
            self.max_cost_usd,
            self.prices,
            chars_per_token=self.window_policy.chars_per_token,
            include_question=self.include_question,
            batch=batch,
        )

    def _judge_one_safe(self, request: JudgeRequest) -> JudgeResult:
        try:
            return self._judge_one(request)
        except Exception as e:  # a bug or an unexpected library error must not sink the whole run
            reason = self.scrub(f"unexpected {type(e).__name__}: {e}")
            log.error("judge %s failed on %s: %s", self.name, request.trace_id, reason)
            return JudgeResult(request.trace_id, "failed", reason=reason)

    def _plan(self, request: JudgeRequest) -> tuple[str, WindowPlan]:
        system = system_prompt(request.dataset)
        return system, plan_windows(request, system, self.window_policy, self.include_question)

    def _first_turns(self, request: JudgeRequest, w: Window) -> list[Turn]:
        q = request.question if self.include_question else None
        return [("user", user_prompt(w.steps, first=w.first, m=request.m, question=q))]

    def _judge_one(self, request: JudgeRequest) -> JudgeResult:
        if request.m == 0:
            return JudgeResult(request.trace_id, "ok", reason="empty trace (m = 0): not sent", windows=0)
        system, plan = self._plan(request)
        if not plan.windows:
            return JudgeResult(request.trace_id, "overflow", reason=plan.overflow_reason, windows=0)
        outcomes = []
        for w in plan.windows:
            tally = _Tally()
            turns = self._first_turns(request, w)
            try:
                reply = self._call_with_retries(system, turns, tally)
            except JudgeError as e:
                outcomes.append(WindowOutcome(w, None, "", self.scrub(str(e)), tally=tally))
                continue
            outcomes.append(self._settle(system, turns, reply, w, tally, can_repair=True))
        return merge_windows(request.trace_id, outcomes)

    def _call_with_retries(self, system: str, turns: Sequence[Turn], tally: _Tally) -> Reply:
        lim = self.limits
        attempt = 0
        while True:
            self._limiter.acquire()
            try:
                reply = self._send(system, turns)
            except TransientError as e:
                if attempt >= lim.max_retries:
                    raise JudgeError(self.scrub(f"gave up after {attempt} retries: {e}")) from None
                if e.retry_after is not None:
                    delay = min(e.retry_after, lim.max_retry_after_s)
                else:
                    delay = backoff_delay(attempt, lim.backoff_base_s, lim.backoff_cap_s)
                attempt += 1
                tally.retries += 1
                log.info(
                    "judge %s: retry %d in %.2fs after: %s", self.name, attempt, delay, self.scrub(str(e))
                )
                self._sleep(delay)
                continue
            tally.add(reply)
            return reply

    def _settle(
        self,
        system: str,
        turns: Sequence[Turn],
        reply: Reply,
        w: Window,
        tally: _Tally,
        *,
        can_repair: bool,
    ) -> WindowOutcome:
        """Validate a reply; if invalid, re-ask ONCE with the repair prompt, then give up as failed."""
        raw = reply.text or ""
        try:
            return WindowOutcome(w, parse_judgement(reply.text, w.first, w.last), raw, tally=tally)
        except ReplyInvalid as e:
            problem = str(e)
        if not can_repair:
            return WindowOutcome(
                w, None, raw, f"invalid reply: {problem} (no repair possible here)", tally=tally
            )
        shown = raw if raw.strip() else "(empty reply)"
        repair_turns = [*turns, ("assistant", shown), ("user", repair_prompt(shown, problem))]
        try:
            second = self._call_with_retries(system, repair_turns, tally)
        except JudgeError as e:
            reason = self.scrub(f"invalid reply: {problem}; repair call failed: {e}")
            return WindowOutcome(w, None, raw, reason, tally=tally)
        raw2 = second.text or ""
        try:
            j = parse_judgement(second.text, w.first, w.last)
        except ReplyInvalid as e2:
            reason = f"invalid reply after one repair: {e2} (first reply: {problem})"
            return WindowOutcome(w, None, raw2, reason, repaired=True, tally=tally)
        return WindowOutcome(w, j, raw2, repaired=True, tally=tally)


def merge_windows(trace_id: str, outcomes: Sequence[WindowOutcome]) -> JudgeResult:
    """Combine per-window outcomes into one result (rules in the module docstring)."""
    retries = sum(o.tally.retries for o in outcomes)
    tin = sum(o.tally.input_tokens for o in outcomes)
    tout = sum(o.tally.output_tokens for o in outcomes)
    repaired = any(o.repaired for o in outcomes)
    if len(outcomes) == 1:
        raw = outcomes[0].raw
    else:
        raw = json.dumps(
            [{"first": o.window.first, "last": o.window.last, "reply": o.raw} for o in outcomes],
            ensure_ascii=False,
        )
    common: dict[str, Any] = dict(
        raw_json=raw,
        retries=retries,
        input_tokens=tin,
        output_tokens=tout,
        repaired=repaired,
        windows=len(outcomes),
    )
    bad = [o for o in outcomes if o.judgement is None]
    if bad or not outcomes:
        if len(outcomes) == 1:
            reason = bad[0].reason
        else:
            reason = "; ".join(f"window {o.window.first}-{o.window.last}: {o.reason}" for o in bad)
        return JudgeResult(trace_id, "failed", reason=reason or "no windows", **common)
    js = [o.judgement for o in outcomes if o.judgement is not None]
    flagged = tuple(sorted({s for j in js for s in j.steps}))
    return JudgeResult(
        trace_id,
        "ok",
        flagged_steps=flagged,
        backtracking_detected=any(j.backtracking_detected for j in js),
        confidence=min(j.confidence for j in js),
        final_answer=js[-1].final_answer,
        dropped_out_of_range=sum(j.dropped for j in js),
        **common,
    )
