"""Seconds per stage of a run, for run summaries and benchmarks that compare them."""

from __future__ import annotations

import time


class Laps:
    """`lap(name)` records the seconds since the previous lap (or since creation) under `name`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 3)
        self._last = now
