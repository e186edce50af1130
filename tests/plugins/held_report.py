"""A plugin (loaded through `LEGIVAL_PLUGINS`, in a process of its own) that holds `legival report` in
the middle of writing its directory: once the CSVs are in the temporary directory and before the
figures, it writes the path of that directory to `LEGIVAL_TEST_REPORT_HELD` and waits until the file
`LEGIVAL_TEST_REPORT_GATE` exists. A test can then signal or kill the command at a known point of the
write, without a clock (tests/cli/test_report_signals.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from legival_core.reports.render import files

_write_plots = files.write_plots


def _held_write_plots(data: Any, out: Path) -> list[str]:
    held, gate = os.environ.get("LEGIVAL_TEST_REPORT_HELD"), os.environ.get("LEGIVAL_TEST_REPORT_GATE")
    if held and gate:
        tmp = Path(held + ".part")
        tmp.write_text(str(out), encoding="utf-8")
        tmp.rename(held)  # whole when it appears: the test reads it as soon as it exists
        wake = threading.Event()
        while not os.path.exists(gate):
            wake.wait(0.02)  # the main thread stays interruptible: signal handlers run between waits
    return _write_plots(data, out)


files.write_plots = _held_write_plots
