"""The one retry loop of model calls: transient errors are retried with backoff, a permanent one is
raised at once, and an endpoint that cannot be reached gets its own short budget.

`call_with_retries(send, policy)` calls `send` (one request, raising the classified errors of
`errors`) until it returns. A `TransientError` is retried `policy.max_retries` times, each after
`policy.backoff(attempt)` seconds (or the server's Retry-After, capped, where the policy honours it);
with `policy.connect_retries` set, a `ConnectionFailed` is retried that many times instead, after
`connect_delay_s`, and giving up on it raises the `ConnectionFailed` itself and tells the run's
breaker. Giving up on any other transient error raises `GaveUp` (`gave up after N retries: ...`); a
`PermanentError` (any other `LLMError`) propagates unchanged. A limiter is acquired before every
attempt; any answer of the server, an error status included, closes the breaker.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from legival_core.llm.breaker import Breaker
from legival_core.llm.errors import ConnectionFailed, LLMError, TransientError
from legival_core.llm.ratelimit import RateLimiter

T = TypeVar("T")
RetryKind = Literal["retry", "connect"]
OnRetry = Callable[[RetryKind, int, float, TransientError], None]
"""on_retry(kind, n, delay_s, error): before the n-th retry of its kind, `delay_s` from now."""


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter": half of min(cap, base * 2**attempt) fixed, half random."""
    r = rng or random
    ceiling = min(cap, base * (2.0**attempt))
    return ceiling / 2.0 + r.uniform(0.0, ceiling / 2.0)


def equal_jitter(base: float, cap: float) -> Callable[[int], float]:
    """`backoff_delay` with this base and cap (the judges')."""
    return lambda attempt: backoff_delay(attempt, base, cap)


def doubling(base: float, jitter: bool = False) -> Callable[[int], float]:
    """base * 2**attempt, times a random factor in [1, 2) with `jitter` (the student backend's; without
    it, the teacher chat engine's)."""
    if jitter:
        return lambda attempt: base * 2**attempt * (1 + random.random())
    return lambda attempt: base * 2**attempt


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait. `max_retry_after_s`: a Retry-After is honoured up to this
    (None: ignored); `connect_retries`: the budget of a `ConnectionFailed` (None: it counts as any
    transient error)."""

    max_retries: int
    backoff: Callable[[int], float]
    max_retry_after_s: float | None = None
    connect_retries: int | None = None
    connect_delay_s: float = 0.0

    def delay(self, attempt: int, error: TransientError) -> float:
        if self.max_retry_after_s is not None and error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after_s)
        return self.backoff(attempt)


class GaveUp(LLMError):
    """A transient error was retried `retries` times and failed again: `error` is the last one."""

    def __init__(self, error: TransientError, retries: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.retries = retries


def _same(text: str) -> str:
    return text


def call_with_retries(
    send: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] | None = None,
    limiter: RateLimiter | None = None,
    breaker: Breaker | None = None,
    on_retry: OnRetry | None = None,
    clean: Callable[[str], str] = _same,
) -> T:
    """`send()`'s result, retried as the module docstring says; `clean` scrubs the messages it writes,
    `sleep` waits (default: `time.sleep`, looked up at each wait)."""
    attempt = connect_attempt = 0
    while True:
        if limiter is not None:
            limiter.acquire()
        try:
            result = send()
        except TransientError as e:
            kind: RetryKind
            if isinstance(e, ConnectionFailed) and policy.connect_retries is not None:
                if connect_attempt >= policy.connect_retries:
                    reason = clean(str(e))
                    if breaker is not None:
                        breaker.unreachable(reason)
                    raise ConnectionFailed(reason) from None
                connect_attempt += 1
                kind, n, delay = "connect", connect_attempt, policy.connect_delay_s
            else:
                if breaker is not None and not isinstance(e, ConnectionFailed):
                    breaker.answered()
                if attempt >= policy.max_retries:
                    raise GaveUp(e, attempt, clean(f"gave up after {attempt} retries: {e}")) from None
                delay = policy.delay(attempt, e)
                attempt += 1
                kind, n = "retry", attempt
            if on_retry is not None:
                on_retry(kind, n, delay, e)
            (sleep or time.sleep)(delay)
            continue
        except LLMError:
            if breaker is not None:
                breaker.answered()
            raise
        if breaker is not None:
            breaker.answered()
        return result
