"""The backtracking-judge interface and the loop every judge shares (SPEC section 3).

A judge reads the numbered steps of one trace and returns the step numbers it flags as backtracking;
the metric is |distinct flagged step numbers in 1..m| / m (`backtracking_fraction`). This module holds
everything that does not depend on the wire protocol: request/result records, reply validation, the
retries (`llm.retry.call_with_retries` under the judge's `JudgeLimits`), the single repair re-ask,
windowing of over-long traces, concurrent fan-out, and the settings every judge is built with
(`BaseJudge.__init__`). A concrete judge (gemini.py, openai_compat.py) implements only `_connect` (its
client, from the endpoint and key) and `_send`: one HTTP call, mapping its errors (`llm.errors`) to
`TransientError` (retried), `ConnectionFailed` (the endpoint cannot be reached: retried
`JudgeLimits.connect_retries` times after a short delay) or `PermanentError` (not retried).

Fail fast: a run's `llm.breaker.Breaker` lets only a few traces through until a call reaches the server;
when those all fail to connect, the remaining traces are not sent (left out of `judge_many`'s results,
so a caller stores nothing for them and they stay to do).

Outcomes, never silent zeros:
- `ok`: a valid reply; out-of-range step numbers are dropped and counted in `dropped_out_of_range`.
- `failed`: the call failed after retries, or the reply was invalid twice (the original and ONE repair
  re-ask that shows the model its bad reply, the problem found, and the schema). `reason` says why.
  `backtracking_fraction` is None for it: a failed judgement is missing data, not "no backtracking".
  A failure a later call could turn out otherwise (`ConnectionFailed`, a `TransientError` still there
  after the retries: `GaveUp`, or an `EndpointRefused`: a key or model the endpoint refuses to
  everyone) is `transient`: the caller does not store it, the trace stays to do.
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
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from legival_core.judges.cost import guard_cost
from legival_core.judges.prompt import PROMPT_VERSION, repair_prompt, system_prompt, user_prompt
from legival_core.judges.records import (
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeStatus,
    MissingAPIKey,
    ProgressFn,
    backtracking_fraction,
)
from legival_core.judges.reply import Judgement, ReplyInvalid, extract_json_text, parse_judgement
from legival_core.judges.windows import Window, WindowPlan, WindowPolicy, plan_windows
from legival_core.llm.breaker import Breaker
from legival_core.llm.cost import DEFAULT_PRICES, Prices
from legival_core.llm.errors import ConnectionFailed, EndpointRefused, TransientError, scrub
from legival_core.llm.fanout import fan_out
from legival_core.llm.ratelimit import RateLimiter
from legival_core.llm.retry import GaveUp, RetryKind, RetryPolicy, call_with_retries, equal_jitter

__all__ = [
    "BaseJudge",
    "Judge",
    "JudgeError",
    "JudgeLimits",
    "JudgeRequest",
    "JudgeResult",
    "JudgeStatus",
    "Judgement",
    "MissingAPIKey",
    "ProgressFn",
    "Reply",
    "ReplyInvalid",
    "Turn",
    "Window",
    "WindowOutcome",
    "WindowPlan",
    "WindowPolicy",
    "backtracking_fraction",
    "extract_json_text",
    "merge_windows",
    "parse_judgement",
    "plan_windows",
]

log = logging.getLogger("legival_core.judges")

Role = Literal["user", "assistant"]
Turn = tuple[Role, str]

# ---------------------------------------------------------------------------------------- shared loop


@dataclass(frozen=True, slots=True)
class Reply:
    """One model reply as the transport saw it."""

    text: str | None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JudgeLimits:
    """Operational settings: they never change a judgement, so they stay out of the cache key.

    `max_retries` bounds the retries of rate limits, 5xx, timeouts and dropped connections (backoff,
    Retry-After honoured); an endpoint that cannot be reached at all gets `connect_retries` retries,
    `connect_retry_delay_s` apart, and `open_after` traces failing to connect before any call of the
    run got an answer open the run's breaker (`llm.breaker.Breaker`). `connect_timeout_s` bounds the TCP
    connect where the transport allows it (openai-compatible)."""

    concurrency: int = 16
    rpm: float | None = None
    rpm_burst: int = 1
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_retry_after_s: float = 300.0
    timeout_s: float = 120.0
    connect_retries: int = 1
    connect_retry_delay_s: float = 0.5
    connect_timeout_s: float = 10.0
    open_after: int = 2

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_retries < 0 or self.connect_retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.max_retries} and {self.connect_retries}")
        if self.open_after < 1:
            raise ValueError(f"open_after must be >= 1, got {self.open_after}")


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
    transient: bool = False


class BaseJudge(ABC):
    """Retries, repair, validation, windowing and concurrency; subclasses implement `_connect` and
    `_send`. The settings every judge takes are declared here, once; a judge declares only its own."""

    name: ClassVar[str]
    default_model: ClassVar[str | None] = None
    """The model when none is given (None: the judge needs `model=`, e.g. a self-hosted server's id)."""
    prompt_version: str = PROMPT_VERSION

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.1,
        max_output_tokens: int | None = 8192,
        include_question: bool = False,
        limits: JudgeLimits | None = None,
        windows: WindowPolicy | None = None,
        max_cost_usd: float | None = None,
        prices: Prices | None = None,
    ) -> None:
        chosen = model or self.default_model
        if not chosen:
            raise TypeError(f"{type(self).__name__} needs model= (the served model id)")
        self.model = chosen
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.include_question = include_question
        self.limits = limits or JudgeLimits()
        self.window_policy = windows or WindowPolicy()
        self.max_cost_usd = max_cost_usd
        self.prices = prices or DEFAULT_PRICES
        self._limiter = RateLimiter(self.limits.rpm, self.limits.rpm_burst)
        self._sleep: Callable[[float], None] = time.sleep
        self.base_url: str | None = None
        self._connect(base_url, api_key)

    # -- to implement -------------------------------------------------------------------------------

    @abstractmethod
    def _connect(self, base_url: str | None, api_key: str | None) -> None:
        """Build the client (after the settings above are set): resolve the endpoint into `base_url` and
        the key (never kept in plain text: `_secrets` names it for scrubbing)."""

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
        return (f"{type(self).__name__}(model={self.model!r}, temperature={self.temperature!r}, "
                f"base_url={self.base_url!r})")

    def scrub(self, text: str) -> str:
        return scrub(text, self._secrets())

    def new_breaker(self) -> Breaker:
        """A circuit breaker for one run (pass the same one to each `judge_many` call of the run)."""
        return Breaker(self.limits.open_after)

    def judge_many(
        self,
        requests: Sequence[JudgeRequest],
        progress: ProgressFn | None = None,
        breaker: Breaker | None = None,
    ) -> list[JudgeResult]:
        """Judge every request concurrently (at most `limits.concurrency` in flight, `limits.rpm`
        calls per minute); results come back in request order. `progress` is called after each
        finished request with the number finished so far. `breaker` (default: a new one for this
        call) spans the run: the requests it does not let through (the endpoint cannot be reached)
        are left out of the results and counted in `breaker.not_sent`."""
        reqs = list(requests)
        for r in reqs:
            system_prompt(r.dataset)  # an unknown dataset fails here, before any paid call
        self._check_budget(reqs, batch=False)
        gate = breaker if breaker is not None else self.new_breaker()
        done = [0]

        def finished(_i: int, _r: JudgeResult | None) -> None:
            done[0] += 1
            if progress is not None:
                progress(done[0])

        results = fan_out(lambda r: self._judge_one_safe(r, gate), reqs, self.limits.concurrency, finished, "judge")
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

    def _judge_one_safe(self, request: JudgeRequest, breaker: Breaker) -> JudgeResult | None:
        """The request's result, or None when the breaker did not let it through (not sent)."""
        if not breaker.enter():
            return None
        try:
            return self._judge_one(request, breaker)
        except Exception as e:  # a bug or an unexpected library error must not sink the whole run
            reason = self.scrub(f"unexpected {type(e).__name__}: {e}")
            log.error("judge %s failed on %s: %s", self.name, request.trace_id, reason)
            return JudgeResult(request.trace_id, "failed", reason=reason)
        finally:
            breaker.leave()

    def _plan(self, request: JudgeRequest) -> tuple[str, WindowPlan]:
        system = system_prompt(request.dataset)
        return system, plan_windows(request, system, self.window_policy, self.include_question)

    def _first_turns(self, request: JudgeRequest, w: Window) -> list[Turn]:
        q = request.question if self.include_question else None
        return [("user", user_prompt(w.steps, first=w.first, m=request.m, question=q))]

    def _judge_one(self, request: JudgeRequest, breaker: Breaker | None = None) -> JudgeResult:
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
                reply = self._call_with_retries(system, turns, tally, breaker)
            except ConnectionFailed as e:  # the trace fails: no point in sending its other windows
                outcomes.append(WindowOutcome(w, None, "", self.scrub(str(e)), tally=tally, transient=True))
                break
            except JudgeError as e:
                outcomes.append(WindowOutcome(w, None, "", self.scrub(str(e)), tally=tally, transient=_transient(e)))
                continue
            outcomes.append(self._settle(system, turns, reply, w, tally, can_repair=True))
        return merge_windows(request.trace_id, outcomes)

    def ask(self, system: str, prompt: str) -> Reply:
        """One free-form question to the judge's model, with its retries, limits and secrets' scrubbing:
        what other readers of traces use the judge backends for (the hint monitor, docs/monitorability.md)."""
        return self._call_with_retries(system, [("user", prompt)], _Tally())

    def _call_with_retries(
        self, system: str, turns: Sequence[Turn], tally: _Tally, breaker: Breaker | None = None
    ) -> Reply:
        """One call and its retries; JudgeError (scrubbed) when it gives up: ConnectionFailed
        (`cannot connect to ...`) when the endpoint could not be reached. Any answer of the server,
        an error status included, closes `breaker`; giving up on a connection tells it."""

        def on_retry(kind: RetryKind, n: int, delay: float, e: TransientError) -> None:
            tally.retries += 1
            if kind == "connect":
                log.info("judge %s: connection retry %d in %.2fs after: %s", self.name, n, delay, self.scrub(str(e)))
            else:
                log.info("judge %s: retry %d in %.2fs after: %s", self.name, n, delay, self.scrub(str(e)))

        reply = call_with_retries(lambda: self._send(system, turns), self._retry_policy(), sleep=self._sleep,
                                  limiter=self._limiter, breaker=breaker, on_retry=on_retry, clean=self.scrub)
        tally.add(reply)
        return reply

    def _retry_policy(self) -> RetryPolicy:
        lim = self.limits
        return RetryPolicy(lim.max_retries, equal_jitter(lim.backoff_base_s, lim.backoff_cap_s),
                           max_retry_after_s=lim.max_retry_after_s, connect_retries=lim.connect_retries,
                           connect_delay_s=lim.connect_retry_delay_s)

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
            return WindowOutcome(w, None, raw, reason, tally=tally, transient=_transient(e))
        raw2 = second.text or ""
        try:
            j = parse_judgement(second.text, w.first, w.last)
        except ReplyInvalid as e2:
            reason = f"invalid reply after one repair: {e2} (first reply: {problem})"
            return WindowOutcome(w, None, raw2, reason, repaired=True, tally=tally)
        return WindowOutcome(w, j, raw2, repaired=True, tally=tally)


def _transient(e: BaseException) -> bool:
    """A failure a later call could turn out otherwise (module docstring): the endpoint unreachable,
    still rate-limited or failing past the retries, or refusing everyone (a key, a model: fixed by the
    user, not by another reply to this trace)."""
    return isinstance(e, TransientError | GaveUp | EndpointRefused)


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
        return JudgeResult(trace_id, "failed", reason=reason or "no windows", transient=any(o.transient for o in bad),
                           **common)
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
