"""Crash logs: what nothing else caught becomes one line for the user and a file with the details.

A user never sees a traceback: an unexpected exception is written, with its traceback and the
command line, to a crash log file (beside the store when the command names one with `--db`, else in
the temp directory) and the command exits 1 with one line saying what failed and where the details
are. Conditions of the machine rather than of our code (a port in use, an unreachable address,
permission denied, a full disk) are the user's to fix: they get their own words and exit 2, like any
other bad input (../shared/CLI.md "Failure contract").
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path

_LOGGED = "_legival_crash_log"

CRASH_DIR_ENV = "LEGIVAL_CRASH_DIR"
"""Where crash logs go, when set (else beside the store, else the temp directory)."""

_KNOWN: dict[int, str] = {
    errno.EADDRINUSE: "the address is already in use (another process listens there)",
    errno.ECONNREFUSED: "the connection was refused (nothing listens at that address)",
    errno.EHOSTUNREACH: "the host is unreachable",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ETIMEDOUT: "the connection timed out",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device (free some, or write elsewhere)",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "a file grew past the size this process may write (ulimit -f)",
    errno.EMFILE: "too many open files (raise `ulimit -n`)",
}


def causes(e: BaseException) -> Iterator[BaseException]:
    """The exception and what caused it (`raise ... from`, or raised while handling), each once."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def known_condition(e: BaseException) -> str | None:
    """The user-facing words for a condition of the machine (an `OSError` of a known errno anywhere
    in the chain of causes), or None for a bug of ours."""
    for c in causes(e):
        if isinstance(c, OSError) and c.errno in _KNOWN:
            where = c.filename if c.filename is not None else None
            text = _KNOWN[c.errno]
            return f"{where}: {text}" if where else text
        if isinstance(c, MemoryError):
            return "out of memory (give the command more memory, or smaller batches in the spec)"
    return None


def crash_dir(args: Sequence[str]) -> Path:
    """Beside the store named by `--db` (where the run's other files are), else the temp directory."""
    env = os.environ.get(CRASH_DIR_ENV)
    if env:
        return Path(env)
    db = _option(args, "--db")
    if db:
        parent = Path(db).expanduser().resolve().parent
        if parent.is_dir() and os.access(parent, os.W_OK):
            return parent / "legival-crashes"
    return Path(tempfile.gettempdir()) / "legival-crashes"


def _option(args: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def write_crash_log(e: BaseException, args: Sequence[str]) -> Path | None:
    """The traceback and the command line in a new file; None when not even the temp directory is
    writable (the error line then says so). Written once per exception: a flow that logged its
    failure (`flows.session.driver_session`) and the command that ran it name the same file."""
    written = getattr(e, _LOGGED, None)
    if isinstance(written, Path):
        return written
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    text = (f"legival {' '.join(args)}\n{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
            f"python {sys.version.split()[0]}, pid {os.getpid()}\n\n"
            + "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    for where in (crash_dir(args), Path(tempfile.gettempdir()) / "legival-crashes"):
        try:
            where.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"crash-{stamp}-{os.getpid()}-", suffix=".log", dir=where)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(redact(text))
            path = Path(name)
        except OSError:
            continue
        with suppress(AttributeError, TypeError):  # an exception type with __slots__ keeps no attribute
            setattr(e, _LOGGED, path)
        return path
    return None


def redact(text: str) -> str:
    """API keys in the environment never reach a file (a traceback may quote a request's headers)."""
    for name, value in os.environ.items():
        if value and len(value) >= 8 and any(k in name.upper() for k in ("KEY", "TOKEN", "SECRET", "PASSWORD")):
            text = text.replace(value, f"<{name}>")
    return text


def summarize(e: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, cut to `limit` characters."""
    msg = " ".join(redact(str(e)).split())
    line = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def crash_message(e: BaseException, args: Sequence[str], what: str = "") -> tuple[str, int]:
    """The `error:` line and the exit status for an exception nothing else handled: a known condition
    (exit 2) in its words, anything else (exit 1) summarised with the path of its crash log."""
    prefix = f"{what}: " if what else ""
    known = known_condition(e)
    log = write_crash_log(e, args)
    details = f"details in {log}" if log is not None else "no crash log could be written (the temp directory is not writable)"
    if known is not None:
        return f"{prefix}{known} ({summarize(e, 200)}; {details})", 2
    return f"{prefix}{summarize(e)} (a bug in Legi-Val or a plugin: {details})", 1

