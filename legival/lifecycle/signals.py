"""SIGTERM, SIGINT and SIGHUP end every command the same way, whatever library it is inside when the
signal lands (an asyncio loop, a worker thread's wait, a C call, code that catches everything): exit
128 + the signal, one `error: interrupted (SIGNAL): ...` line on standard error, no traceback, within
`EXIT_DEADLINE_S` of the signal (plus, at worst, the children's grace). SIGTERM comes from `kill`, a
scheduler or a closed CI step, SIGHUP from a closed terminal or SSH session, SIGINT from Ctrl-C.

Three layers, each covering what the one before cannot:

1. **The signal raises on the main thread** (`Terminated`), so every `with` and `finally` on the way
   out runs (a report's temporary directory is removed, a server stopped, a store transaction rolled
   back). `Terminated` is a `KeyboardInterrupt`: asyncio re-raises KeyboardInterrupt and SystemExit
   from a callback or a task step and logs and swallows any other BaseException ("Exception in
   callback ..."; the loop then waits forever for a future that callback was to complete), and
   concurrent.futures, anyio, Ray and Prefect treat it as the Ctrl-C it is (propagated, pending work
   cancelled). SIGINT raises it too, instead of Python's bare KeyboardInterrupt, so that asyncio.run
   does not put its own SIGINT handler in (it does only over Python's default one) and Ctrl-C ends
   the same way as SIGTERM.
2. **The signal is the fact, the exception only its messenger.** The first signal is recorded
   (`received`), and the error boundary (`legival.app.LegivalGroup.invoke`, and `legival.console.fail`:
   `interruption`) reports it whatever reaches it: the exception itself, what a library made of it (an exception
   group, a RuntimeError, its own SystemExit, an `error:` of ours about a file it could not finish),
   or nothing at all (a library swallowed it and the command went on). From the signal on, the
   libraries' last words are muted: logging disabled, warnings ignored, unraisable and thread
   exceptions unprinted (asyncio's "Task exception was never retrieved", an async generator closed
   mid-read).
3. **A deadline.** `EXIT_DEADLINE_S` after the first signal, a watchdog thread writes the line (unless
   it was written), ends every child (`legival_core.lifecycle.children.end_all`) and exits 128 + the signal with
   `os._exit`, each step bounded (a stream or a lock the stuck thread holds cannot keep it). It is
   armed by a thread that reads the signal wakeup fd, not only by the handler: Python runs a handler on
   the main thread between two bytecodes, so never while the main thread sits in a C call that does
   not return on a signal (a mutex, a native library joining its threads), nor when a library swallowed
   the exception and waits on. A second signal does the same at once: the user asked twice.

`legival run` and `calibrate` replace the handlers with their graceful cancel (`legival.lifecycle.cancel`), `serve`
with its stop (`legival.lifecycle.servers`): both end within a bound of their own through `exit_after`.

Out of reach: a C call that holds the interpreter (the GIL) and never lets go: no Python thread runs,
so only SIGKILL ends the process (its children then end through the guardian, `legival_core.lifecycle.guardian`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_DEADLINE_S = 5.0
"""Seconds between the first signal and the forced exit of a command that has not ended by then
(docs/CLI.md: every command ends within 15 s of the signal; the way out normally takes well under 1 s)."""
SAY_S = 1.0
"""What the forced exit gives the streams' flush and its line, at most (a full pipe blocks a write)."""
CHILDREN_S = 3.5
"""What it gives the children's end, at most (`legival_core.lifecycle.children.GRACE_S` and a margin)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGHUP arrived. A KeyboardInterrupt, so that asyncio re-raises it from a
    callback instead of logging it and waiting on, and no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)  # the args a copy (pickle, copy) builds it again from
        self.signum = signum

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def interrupted_message(signum: int) -> str:
    return (f"interrupted ({signal.Signals(signum).name}): what was committed before stays stored; "
            "rerun to resume")


def interrupted_line(signum: int) -> str:
    """The closing line of a command a signal ended."""
    return f"error: {interrupted_message(signum)}"


class _Command:
    """What one command (a `terminations_raise` block) knows of the signals it received."""

    def __init__(self) -> None:
        self.first: int | None = None
        """The first signal that ended the command (`received`)."""
        self.armed: int | None = None
        """The first signal heard at all: it armed the deadline."""
        self.heard = {"handler": 0, "watcher": 0}
        self.lock = threading.RLock()  # a second signal's handler may run inside the first one's
        self.said = threading.Lock()
        """Taken by whoever writes the command's closing line: it is written once."""

    def hear(self, signum: int, by: str, record: bool) -> None:
        """A signal, as the handler (main thread) or the wakeup fd's thread sees it: each sees every
        signal once, so each counts on its own. The first arms the deadline; a second: exit now.
        `record`: it ends the command (the handler's, a third party's handler's; not one the handler
        will record itself when it runs)."""
        with self.lock:
            self.heard[by] += 1
            again = self.heard[by] > 1
            arm = self.armed is None
            if arm:
                self.armed = signum
                exit_after(EXIT_DEADLINE_S, signum, interrupted_line(signum))
            if record and self.first is None:
                self.first = signum
            first = self.armed if self.armed is not None else signum
        if again:
            force_exit(first, interrupted_line(first))
        if by == "handler":  # on the main thread, before the exception leaves: whoever armed the deadline
            _hush()
        elif arm:  # on a thread of its own: the watcher never waits for a lock the stuck thread may hold
            threading.Thread(target=_hush, name="legival-hush", daemon=True).start()


_current: _Command | None = None


def received() -> int | None:
    """The first signal the running command received (None: none, or no command is running)."""
    return _current.first if _current is not None else None


def claim_line() -> bool:
    """Whether the caller is the one to write the command's closing line (the first to ask)."""
    return _current is None or _current.said.acquire(blocking=False)


def interruption(signum: int | None = None) -> tuple[str, int] | None:
    """(the closing line's message, the exit status) when a signal ended the command: the first one
    received, else `signum` (an interrupt that reached the boundary with no signal recorded); None when
    none did. Whoever writes the line takes `claim_line` first."""
    first = received()
    signum = first if first is not None else signum
    return None if signum is None else (interrupted_message(signum), 128 + signum)


def exit_promptly() -> None:
    """The console script's end after a signal, once the boundary wrote the line (nothing when no
    signal came): the `atexit` handlers run, the streams are flushed, and the process exits without the
    interpreter's wait for every non-daemon thread, which a library's threads can hold forever (anyio's
    workers, when the signal stopped their event loop, wait for work that never comes)."""
    signum = received()
    if signum is None:
        return
    import atexit

    with suppress(BaseException):
        atexit._run_exitfuncs()
    _say(None)
    os._exit(128 + signum)


def _hush() -> None:
    """The libraries' last words after a signal: not printed (module docstring, 2)."""
    import logging
    import warnings

    with suppress(Exception):
        sys.unraisablehook = lambda _u: None
        threading.excepthook = lambda _a: None
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)


def exit_after(seconds: float, signum: int, line: str | None) -> threading.Timer:
    """In `seconds`, `force_exit(signum, line)` unless the process ended before (a daemon timer)."""
    timer = threading.Timer(seconds, force_exit, (signum, line))
    timer.name, timer.daemon = "legival-exit-deadline", True
    timer.start()
    return timer


_forcing = threading.Lock()


def force_exit(signum: int, line: str | None) -> NoReturn:
    """The way out when the command's own does not come: `line` on standard error unless the command
    wrote its closing line, every child ended, then `os._exit(128 + signum)`; each step bounded."""
    if not _forcing.acquire(blocking=False):  # another thread is on its way out: it exits the process
        threading.Event().wait()
    _bounded(_say, line, limit=SAY_S)
    _bounded(_end_children, None, limit=CHILDREN_S)
    os._exit(128 + signum)


def _bounded(fn: Callable[[Any], None], arg: Any, limit: float) -> None:
    t = threading.Thread(target=fn, args=(arg,), name="legival-exit", daemon=True)
    t.start()
    t.join(limit)


def _say(line: str | None) -> None:
    for stream in (sys.stdout, sys.stderr):  # what the command printed before comes first
        with suppress(Exception):
            stream.flush()
    if line and claim_line():
        with suppress(OSError):
            os.write(2, (line + "\n").encode("utf-8", "replace"))  # the raw fd: no lock of the stuck thread's


def _end_children(_: object) -> None:
    from legival_core.lifecycle.children import end_all

    with suppress(Exception):
        end_all()


def graceful(handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    """Mark a signal handler that ends its command gracefully on its own (`legival.lifecycle.cancel`,
    `legival.lifecycle.servers`): while it is in place, `terminations_raise` leaves its signals to it."""
    handler.legival_graceful = True  # type: ignore[attr-defined]
    return handler


@contextmanager
def terminations_raise() -> Iterator[None]:
    """Within the block, SIGTERM, SIGINT and SIGHUP raise `Terminated` on the main thread, and the
    command ends within the deadline whatever holds it (module docstring). Off the main thread (a
    command invoked from a worker thread) Python cannot set handlers: no-op."""
    global _current
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outer, command = _current, _Command()

    def handler(signum: int, _frame: Any) -> None:
        command.hear(signum, "handler", record=True)
        raise Terminated(signum)

    def watch(fd: int) -> None:
        """Every signal as it arrives (the wakeup fd), on this thread: the deadline is armed even when
        the main thread cannot run the handler. A graceful handler's signals are left to it; one a
        library put in place of ours (Prefect's, Ray's) ends the command as ours would."""
        try:
            while data := os.read(fd, 64):
                for signum in data:
                    now = signal.getsignal(signum) if signum in SIGNALS else None
                    if now is not None and not getattr(now, "legival_graceful", False):
                        command.hear(signum, "watcher", record=now is not handler)
        except OSError:
            pass
        finally:
            os.close(fd)

    old = {s: signal.signal(s, handler) for s in SIGNALS}
    r, w = os.pipe()
    os.set_blocking(w, False)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    threading.Thread(target=watch, args=(r,), name="legival-signals", daemon=True).start()
    _current = command
    try:
        yield
    finally:
        # the deadline, once armed, stays: the process is on its way out, and a hang at the
        # interpreter's exit (a worker thread joined) is what it is for
        signal.set_wakeup_fd(old_fd)
        for s, h in old.items():
            signal.signal(s, h)
        os.close(w)
        if command.first is None:
            _current = outer
