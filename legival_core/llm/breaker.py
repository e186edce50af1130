"""A run's circuit breaker: stop sending when a model endpoint cannot be reached at all.

A refused, unknown or unreachable endpoint fails every call in milliseconds; trying each of thousands
of traces (and storing each as `failed`, which a rerun then skips) helps nobody. One `Breaker` spans a
run (for a judge, `legival judge`: the whole stage, every chunk; a bare `judge_many` call: that call);
`retry.call_with_retries` tells it what each call met:

- until a call of the run reaches the server (any HTTP answer, an error status included), it is
  PROBING: at most `open_after` traces may be in flight or already lost to connection failures, so
  a dead endpoint sees exactly `open_after` traces and no more;
- once `open_after` traces have failed to connect while probing, it is OPEN: the remaining traces
  are not sent (`enter` says no), not stored, and counted in `not_sent`; they stay to do for the
  next run. The traces that were tried keep their `failed` result;
- once any call reaches the server it is CLOSED for the rest of the run: full concurrency, and a
  later connection failure is an ordinary failed trace (an outage mid-run does not open it).

Thread-safe: a client's worker threads share it.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class Breaker:
    """See the module docstring. `open_after` >= 1."""

    def __init__(self, open_after: int = 2) -> None:
        if open_after < 1:
            raise ValueError(f"open_after must be >= 1, got {open_after}")
        self.open_after = open_after
        self._cond = threading.Condition()
        self._reached = False
        self._open = False
        self._in_flight = 0
        self._connect_failures = 0
        self.not_sent = 0
        self.reason = ""

    @property
    def reached(self) -> bool:
        return self._reached

    @property
    def is_open(self) -> bool:
        return self._open

    def enter(self) -> bool:
        """Before a trace is sent: True to send it (call `leave` after), False when the breaker is
        open (the trace is counted as not sent). Blocks while probing and the probe is full."""
        with self._cond:
            while (not self._reached and not self._open
                   and self._in_flight + self._connect_failures >= self.open_after):
                self._cond.wait()
            if self._open:
                self.not_sent += 1
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        """After a trace that `enter` let through has finished, however it ended."""
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def answered(self) -> None:
        """A call got an answer from the server (a reply or an HTTP error): close the breaker."""
        if self._reached:
            return
        with self._cond:
            self._reached = True
            self._cond.notify_all()

    def unreachable(self, reason: str) -> None:
        """A trace gave up because the endpoint could not be reached (`reason` is scrubbed)."""
        with self._cond:
            if self._reached or self._open:
                return
            self._connect_failures += 1
            if self._connect_failures >= self.open_after:
                self._open, self.reason = True, reason
                log.info("judge endpoint unreachable (%s): the remaining traces are not sent", reason)
            self._cond.notify_all()
