"""`legival_core.llm.retry`: the one retry loop (scripted `send`s, a recorded `sleep`: no waiting)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from legival_core.llm.breaker import Breaker
from legival_core.llm.errors import ConnectionFailed, LLMError, PermanentError, TransientError
from legival_core.llm.retry import (
    GaveUp,
    RetryPolicy,
    backoff_delay,
    call_with_retries,
    doubling,
    equal_jitter,
)


def scripted(*outcomes: object) -> tuple[Callable[[], str], list[int]]:
    """A `send` that raises or returns `outcomes` in turn; the list counts its calls."""
    calls: list[int] = []

    def send() -> str:
        calls.append(1)
        o = outcomes[len(calls) - 1]
        if isinstance(o, BaseException):
            raise o
        return str(o)

    return send, calls


def test_transient_errors_are_retried_with_backoff_then_given_up() -> None:
    slept: list[float] = []
    seen: list[tuple[str, int, float]] = []
    send, calls = scripted(TransientError("HTTP 503"), TransientError("HTTP 502"), "ok")
    policy = RetryPolicy(3, doubling(0.5))
    out = call_with_retries(send, policy, sleep=slept.append, on_retry=lambda k, n, d, e: seen.append((k, n, d)))
    assert out == "ok" and len(calls) == 3 and slept == [0.5, 1.0]
    assert seen == [("retry", 1, 0.5), ("retry", 2, 1.0)]

    send, calls = scripted(*[TransientError("HTTP 503")] * 3)
    with pytest.raises(GaveUp, match=r"^gave up after 2 retries: HTTP 503$") as ei:
        call_with_retries(send, RetryPolicy(2, doubling(0.5)), sleep=slept.append)
    assert len(calls) == 3 and ei.value.retries == 2 and str(ei.value.error) == "HTTP 503"
    assert isinstance(ei.value, LLMError)


def test_retry_after_is_honoured_capped_only_where_the_policy_says() -> None:
    slept: list[float] = []
    honour = RetryPolicy(2, doubling(1.0), max_retry_after_s=5.0)
    send, _ = scripted(TransientError("429", retry_after=2.0), TransientError("429", retry_after=60.0), "ok")
    call_with_retries(send, honour, sleep=slept.append)
    assert slept == [2.0, 5.0]
    send, _ = scripted(TransientError("429", retry_after=2.0), "ok")
    call_with_retries(send, RetryPolicy(2, doubling(1.0)), sleep=slept.append)
    assert slept[-1] == 1.0  # ignored: the backoff


def test_a_permanent_error_is_raised_at_once_and_closes_the_breaker() -> None:
    b = Breaker(open_after=1)
    send, calls = scripted(PermanentError("HTTP 401"))
    with pytest.raises(PermanentError, match="HTTP 401"):
        call_with_retries(send, RetryPolicy(5, doubling(1.0)), sleep=lambda s: None, breaker=b)
    assert len(calls) == 1 and b.reached


def test_connection_failures_have_their_own_budget_and_open_the_breaker() -> None:
    b = Breaker(open_after=1)
    slept: list[float] = []
    kinds: list[str] = []
    policy = RetryPolicy(6, doubling(1.0), connect_retries=1, connect_delay_s=0.25)
    send, calls = scripted(ConnectionFailed("cannot connect to http://x: sk-1"), ConnectionFailed("cannot connect: sk-1"))
    with pytest.raises(ConnectionFailed, match=r"^cannot connect: \[gone\]$"):
        call_with_retries(send, policy, sleep=slept.append, breaker=b, on_retry=lambda k, n, d, e: kinds.append(k),
                          clean=lambda t: t.replace("sk-1", "[gone]"))
    assert len(calls) == 2 and slept == [0.25] and kinds == ["connect"]
    assert b.is_open and b.reason == "cannot connect: [gone]" and not b.reached

    # without a connection budget, a connection failure is one more transient error (and answers nothing)
    b2 = Breaker(open_after=1)
    send, calls = scripted(ConnectionFailed("refused"), ConnectionFailed("refused"))
    with pytest.raises(GaveUp, match="gave up after 1 retries: refused"):
        call_with_retries(send, RetryPolicy(1, doubling(1.0)), sleep=lambda s: None, breaker=b2)
    assert len(calls) == 2 and not b2.reached and not b2.is_open


def test_every_attempt_waits_for_the_limiter() -> None:
    class Counting:
        n = 0

        def acquire(self) -> float:
            self.n += 1
            return 0.0

    lim = Counting()
    send, _ = scripted(TransientError("x"), TransientError("x"), "ok")
    call_with_retries(send, RetryPolicy(2, doubling(0.0)), sleep=lambda s: None, limiter=lim)  # type: ignore[arg-type]
    assert lim.n == 3


def test_backoffs() -> None:
    rng = random.Random(0)
    for attempt in range(8):
        ceiling = min(10.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= backoff_delay(attempt, 0.5, 10.0, rng) <= ceiling
    assert 0.5 <= equal_jitter(1.0, 60.0)(0) <= 1.0
    assert [doubling(0.5)(a) for a in range(3)] == [0.5, 1.0, 2.0]
    assert all(0.5 * 2**a <= doubling(0.5, jitter=True)(a) < 1.0 * 2**a for a in range(4))
