"""Graceful cancel of `legival run` (the long command: hours on a cluster): SIGTERM (Prefect,
a scheduler, `kill`), SIGINT (Ctrl-C) or SIGHUP (a closed terminal or SSH session) asks every stage to
stop at its next batch boundary (`legival_core.lifecycle.cancel`; the engines on Ray are killed at once,
dropping the chunks they hold); the command then prints what is stored, ends every process it
started (`legival_core.lifecycle.children.end_all`) and exits 128 + the signal. A stage that cannot reach a
boundary in time (an engine that hangs) does not hold the process: `CANCEL_GRACE_S` after the
signal, or at a second signal, the watchdog does the same at once. Nothing committed is lost either
way: every batch commits in one transaction, and the rerun computes exactly what is missing."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from legival.console import emit_summary, err_console

CANCEL_GRACE_S = 10.0
"""Seconds between a cancel signal and the exit, at most (the issue's contract: within 15 s)."""
LEAVE_S = 3.5
"""What the way out (the closing lines, the children's end) may take before the process exits anyway."""

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REPEAT_S = 1.0
"""A signal this soon after the first is the same cancel (Prefect's SIGTERM bridge re-sends it)."""


class Cancel:
    """What `cancellable` yields: the signals received, and `leave()`, the one way out once cancelled
    (the command's own thread and the watchdog may both reach it: the first one prints and exits)."""

    def __init__(self, stored: Callable[[], dict[str, Any]], command: str) -> None:
        self.received: list[int] = []
        self.stored, self.command = stored, command
        self._exiting = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.received)

    def leave(self, signum: int | None = None, why: str = "") -> None:
        """Print what is stored, end every process this one started, then exit 128 + the signal,
        skipping the joins of engine threads held mid-chunk (every committed batch is durable in the
        store)."""
        signum = signum if signum is not None else self.received[0]
        if not self._exiting.acquire(blocking=False):
            return
        from legival.lifecycle.signals import exit_after

        name = signal.Signals(signum).name
        exit_after(LEAVE_S, signum, f"cancelled ({name}; the closing summary did not come within {LEAVE_S:g} s): the "
                                    f"store keeps every committed batch: rerun `{self.command}` to resume")
        finish(signum, self.stored, self.command, why)
        end_children()
        os._exit(128 + signum)


@contextmanager
def cancellable(stored: Callable[[], dict[str, Any]], command: str) -> Iterator[Cancel]:
    """Within the block, SIGTERM/SIGINT cancel (module docstring). `stored()` says what the store
    holds of this run's work, for the closing lines."""
    from legival_core.lifecycle.cancel import request_cancel, reset_cancel

    cancel = Cancel(stored, command)
    received = cancel.received
    leave = cancel.leave

    first: list[float] = []

    def act(signum: int) -> None:
        if received:
            # a second signal: now; but not the one Prefect's SIGTERM bridge sends again at once
            if time.monotonic() - first[0] > REPEAT_S:
                leave(signum, "a second signal")
            return
        received.append(signum)
        first.append(time.monotonic())
        name = signal.Signals(signum).name
        request_cancel(name)
        err_console.print(f"cancelling ({name}): the batches in flight are committed or dropped; exit within "
                          f"{CANCEL_GRACE_S:g} s (again to exit now)", markup=False, highlight=False)
        watchdog = threading.Timer(CANCEL_GRACE_S, leave, (signum, f"{CANCEL_GRACE_S:g} s after the signal"))
        watchdog.daemon = True
        watchdog.start()

    def watch(fd: int) -> None:
        """The signals as they arrive, on a thread of our own: CPython runs a Python handler on the
        main thread only, and a main thread blocked waiting for Prefect's task futures (Ray's threads
        took the signal) would never run it; the wakeup fd hears every signal at once."""
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in SIGNALS:
                    handler(signum, None)

    reset_cancel()
    lock = threading.Lock()

    def handler(signum: int, _frame: Any) -> None:
        with lock:
            act(signum)

    from legival.lifecycle.signals import graceful

    old = {s: signal.signal(s, graceful(lambda _s, _f: None)) for s in SIGNALS}  # the wakeup fd's thread acts
    r, w = os.pipe()
    os.set_blocking(w, False)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    threading.Thread(target=watch, args=(r,), name="legival-cancel-signals", daemon=True).start()
    try:
        yield cancel
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, h in old.items():
            signal.signal(s, h)
        os.close(w)


def end_children() -> None:
    """Every process this command started and that still runs (the Prefect server, the local Ray,
    workers): ended before a forced exit, which skips the `atexit` handlers that would stop them."""
    from legival_core.lifecycle.children import end_all

    with suppress(Exception):  # the exit must happen; the guardian ends what is left
        end_all()
    sys.stderr.flush()


def finish(signum: int, stored: Callable[[], dict[str, Any]], command: str, why: str = "") -> None:
    """The closing lines of a cancelled command: what is stored, how to resume, and the JSON summary."""
    name = signal.Signals(signum).name
    try:
        what = stored()
    except Exception:  # noqa: BLE001 - the summary must come out whatever state the run is in
        what = {}
    parts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in what.items())
    from legival.lifecycle.signals import claim_line

    if claim_line():  # else the forced exit (legival.lifecycle.signals.exit_after) wrote its line
        err_console.print(f"cancelled ({name}{'; ' + why if why else ''}): stored {parts or 'every batch committed before it'}; "
                          f"the store keeps every committed batch: rerun `{command}` to resume",
                          markup=False, highlight=False, soft_wrap=True)
    with suppress(SystemExit):  # a ledger of failed units must not stop the exit
        emit_summary({"command": command.split()[1] if len(command.split()) > 1 else command, "cancelled": name, **what})
    sys.stdout.flush()
    sys.stderr.flush()
