"""The run's log file: everything Prefect, Ray and the stages log while `legival run` or `legival
calibrate` runs, tracebacks included; the terminal shows the same lines without tracebacks.

Why: a known condition (a store another run holds, a trace file gone, a key refused) is one `error:`
line for the user (`legival_core.stages.conditions`), but Prefect logs every failed task and flow with
its traceback ("Encountered exception during execution"), and a thread that dies prints its own. Those
tracebacks are for whoever debugs, not for the user's terminal: here they go to a file beside the store
(`legival-logs/run-<UTC time>-<pid>.log`, or `LEGIVAL_LOG_DIR`), which the error line names. The last
`KEEP` run logs of a directory are kept. API keys of the environment are redacted from every line.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from legival_core.crashlog import redact

LOG_DIR_ENV = "LEGIVAL_LOG_DIR"
KEEP = 20
"""Run logs kept per directory (the oldest beyond this are removed when a run starts)."""

_current: list[Path] = []


def current_log() -> Path | None:
    """The log file of the run in progress in this process, if any."""
    return _current[-1] if _current else None


@contextmanager
def run_log(db: str | None) -> Iterator[Path | None]:
    """Within the block, the root logger also writes to a new run log (its path yielded; None when no
    directory is writable) and every other handler of the root logger drops tracebacks; a thread's
    uncaught exception is logged (one line on the terminal, its traceback in the file)."""
    path = _new_path(db)
    if path is None:
        yield None
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_Redacted("%(asctime)s %(levelname)-7s %(threadName)s %(name)s - %(message)s"))
    root = logging.getLogger()
    others = [(h, h.formatter) for h in root.handlers]
    for h, f in others:
        h.setFormatter(_NoTraceback(f))
    root.addHandler(handler)
    old_hook = threading.excepthook
    threading.excepthook = _log_thread_exception
    _current.append(path)
    try:
        yield path
    finally:
        _current.remove(path)
        threading.excepthook = old_hook
        root.removeHandler(handler)
        handler.close()
        for h, f in others:
            h.setFormatter(f)


def _new_path(db: str | None) -> Path | None:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    env = os.environ.get(LOG_DIR_ENV)
    candidates = [Path(env)] if env else []
    if db:
        candidates.append(Path(db).expanduser().resolve().parent / "legival-logs")
    candidates.append(Path(tempfile.gettempdir()) / "legival-logs")
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"run-{stamp}-{os.getpid()}.log"
            path.touch()
        except OSError:
            continue
        _prune(folder, keep=path)
        return path
    return None


def _prune(folder: Path, keep: Path) -> None:
    logs = sorted((p for p in folder.glob("run-*.log") if p != keep), key=lambda p: p.stat().st_mtime)
    for old in logs[: max(0, len(logs) - (KEEP - 1))]:
        with suppress(OSError):
            old.unlink()


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    logging.getLogger("legival.run").error("thread %s died: %s", getattr(args.thread, "name", "?"),
                                           f"{args.exc_type.__name__}: {exc}",
                                           exc_info=(args.exc_type, exc, args.exc_traceback))


class _Redacted(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _NoTraceback(logging.Formatter):
    """A handler's own formatter, without the record's traceback or stack (the run log has them)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        saved: tuple[Any, Any, Any] = (record.exc_info, record.exc_text, record.stack_info)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
