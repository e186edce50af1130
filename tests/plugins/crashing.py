"""A plugin with a bug (loaded through `LEGIVAL_PLUGINS`, in a process of its own): a derived report
column whose computation raises what `LEGIVAL_TEST_CRASH` names, so that the CLI's error boundary
(`legival.app.LegivalGroup`, `legival_core.crashlog`) meets an exception nothing else catches."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from legival_core.metrics.base import metric

if TYPE_CHECKING:
    import polars as pl


def _crash(traces: pl.DataFrame) -> pl.DataFrame:
    kind = os.environ.get("LEGIVAL_TEST_CRASH", "bug")
    # wrapped in what a library would raise: the command's own `except OSError` does not see them
    conditions = {"disk-full": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/report/teacher_metrics.csv"),
                  "permission": PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/report"),
                  "port": OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))}
    conditions["broken-pipe"] = BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))  # a write to a closed pipe
    if kind in conditions:
        try:
            raise conditions[kind]
        except OSError as e:
            raise RuntimeError("the library failed") from e
    secret = os.environ.get("LEGIVAL_TEST_SECRET_KEY", "")
    raise ZeroDivisionError(f"a plugin's bug (request header: {secret})")


metric("crashing_plugin_column", unit="ratio", direction=None, section="tests", stage="efficiency", source="derived",
       derive=_crash, description="a derived column whose computation raises (tests of the error boundary)")
