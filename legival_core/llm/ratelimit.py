"""A client-side requests-per-minute limit: a token bucket shared by the threads of one client (a judge)."""

from __future__ import annotations

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
