"""SIGTERM and SIGHUP end a command the way Ctrl-C does: as an exception on the main thread, so that
every `with` and `finally` on the way out runs (a report's temporary directory is removed, a server is
stopped, a store transaction is rolled back) and the command exits 128 + the signal with one line.

Without this, SIGTERM (`kill`, a scheduler, a closed CI step) and SIGHUP (a closed terminal or SSH
session) kill the interpreter where it stands: nothing is cleaned. `legival run` and `calibrate`
replace these handlers with their graceful cancel (`legival.cancel`) for the flow's duration; `serve`
with its own stop (after the page is built).

A second signal while the first one's clean-up runs exits at once (os._exit): the user asked twice.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def terminations_raise() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise `Terminated` on the main thread (module docstring).
    Off the main thread (a command invoked from a worker thread) Python cannot set handlers: no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if fired:
            os._exit(128 + signum)
        fired.append(signum)
        raise Terminated(signum)

    old = {s: signal.signal(s, handler) for s in TERMINATING}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
