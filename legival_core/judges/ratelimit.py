"""Client-side limits shared by every judge: a requests-per-minute token bucket and backoff delays."""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """A thread-safe token bucket: on average at most `rpm` acquisitions per minute.

    `burst` tokens may be spent at once (default 1, i.e. evenly spaced requests), so no 60-s window ever
    holds more than rpm + burst requests. `rpm=None` disables the limit.
    """

    def __init__(
        self,
        rpm: float | None,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rpm is not None and rpm <= 0:
            raise ValueError(f"rpm must be positive or None, got {rpm}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.rpm = rpm
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()

    def acquire(self) -> float:
        """Block until a request may be sent; returns the seconds waited."""
        if self.rpm is None:
            return 0.0
        rate = self.rpm / 60.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * rate)
            self._last = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / rate
        # The token is reserved under the lock; sleeping outside it lets other threads queue behind.
        if wait > 0:
            self._sleep(wait)
        return wait


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter": half of min(cap, base * 2**attempt) fixed, half random."""
    r = rng or random
    ceiling = min(cap, base * (2.0**attempt))
    return ceiling / 2.0 + r.uniform(0.0, ceiling / 2.0)


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, dt.timestamp() - now())
