"""What both browser-facing servers' commands share (`legival serve`, `legival study serve`): the stop
signals that end a server as its normal end, the refusal counter that names the first few refused
values on stderr, and the loopback test behind the warning for a non-loopback --host."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from legival.console import err_console

if TYPE_CHECKING:
    from legival_core.web.server import LocalServer

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each ends the server the same way: answers in flight finish, the closing line, exit 0."""

STOP_S = 10.0
"""Seconds between a stop signal and the forced exit of a server that has not stopped by then (its
answers in flight get 5 s, `legival_core.web.server.GRACE_S`); a second signal: now."""

MAX_REFUSAL_WARNINGS = 5
"""Distinct refused values (Host, Origin) named on stderr; the rest are only counted."""


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """Within the block, SIGINT, SIGTERM and SIGHUP are recorded (the list yielded) instead of raised:
    the server stops as its normal end, within `STOP_S` (else exit 128 + the signal with one line; a
    second signal: at once). Python runs the handlers on this (the main) thread."""
    from legival.lifecycle.signals import exit_after, force_exit, graceful

    got: list[int] = []

    def line(signum: int) -> str:
        return (f"error: interrupted ({signal.Signals(signum).name}): the server did not stop within {STOP_S:g} s "
                "of the signal (answers still in flight were dropped)")

    @graceful
    def stop(signum: int, _frame: object) -> None:
        if got:  # a second signal: now
            force_exit(got[0], line(got[0]))
        got.append(signum)
        exit_after(STOP_S, signum, line(signum))  # an answer that never ends cannot hold the exit (legival/lifecycle/signals.py)

    old = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def until_stopped(server: LocalServer, got: list[int]) -> int | None:
    """Block until a stop signal (its number) or the server ends on its own (None; ServerFailed when
    it ended with an error)."""
    while not got:
        if server.wait(0.5):
            return None
    return got[0]


def is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


class Refusals:
    """Counts refused requests and names the first few distinct values on stderr: a user behind a proxy
    learns which --allow-host to add; an attack is visible."""

    def __init__(self) -> None:
        self.count = 0
        self._named: set[tuple[str, str]] = set()

    def __call__(self, what: str, value: str) -> None:
        self.count += 1
        key = (what, value[:80])
        if key in self._named or len(self._named) >= MAX_REFUSAL_WARNINGS:
            return
        self._named.add(key)
        hint = " (add --allow-host NAME if it is yours)" if what == "host" else ""
        err_console.print(f"warning: refused a request with {what} {ascii(value[:80])}{hint}",
                          markup=False, highlight=False, soft_wrap=True)
