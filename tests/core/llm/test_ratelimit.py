"""`legival_core.llm.ratelimit`: the requests-per-minute token bucket (a fake clock: no waiting)."""

from __future__ import annotations

import pytest

from legival_core.llm.ratelimit import RateLimiter


def test_token_bucket_spaces_requests() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    lim = RateLimiter(60, burst=2, clock=lambda: now[0], sleep=sleep)
    assert lim.acquire() == 0.0 and lim.acquire() == 0.0  # the burst
    assert lim.acquire() == pytest.approx(1.0)  # then one a second
    now[0] += 5.0
    assert lim.acquire() == 0.0
    assert RateLimiter(None).acquire() == 0.0
    with pytest.raises(ValueError):
        RateLimiter(0)
