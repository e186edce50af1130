"""Holds a run at a named point (loaded through `LEGIVAL_PLUGINS`, in the run's own process), so that a
test can signal it there without a clock (tests/flows/test_process_lifecycle.py).

`LEGIVAL_TEST_HOLD` names the point: `efficiency` (a per-trace metric of the efficiency stage),
`quality` (a quality group, `held_quality`, the spec must ask for it) or `report` (the report's figures,
once its CSVs are written). Reached, it appends the point to the file `LEGIVAL_TEST_HOLD_MARK` and
waits, as a unit of real work would take its time, until the run is cancelled (the stage then reaches its
batch boundary) or the file `LEGIVAL_TEST_HOLD_GATE` exists. With `LEGIVAL_TEST_HOLD_STUBBORN=1` a cancel
does not release it (a unit stuck in native code): only the cancel's watchdog ends the command."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.lifecycle.cancel import cancel_requested
from legival_core.metrics.base import MetricValue, TraceMetric, TraceText, metric
from legival_core.quality.group import QualityGroup, QualityMetric, register_quality_group, row
from legival_core.reports.render import files

if TYPE_CHECKING:
    from legival_core.run_config import Efficiency


def hold(point: str) -> None:
    """Hold here when the run asked for `point` (module docstring)."""
    if os.environ.get("LEGIVAL_TEST_HOLD") != point:
        return
    mark, gate = os.environ.get("LEGIVAL_TEST_HOLD_MARK"), os.environ.get("LEGIVAL_TEST_HOLD_GATE", "")
    stubborn = os.environ.get("LEGIVAL_TEST_HOLD_STUBBORN") == "1"
    if mark:
        with open(mark, "a", encoding="utf-8") as f:
            f.write(point + "\n")
    wake = threading.Event()
    while not (gate and os.path.exists(gate)) and (stubborn or not cancel_requested()):
        wake.wait(0.02)


def _chars(traces: Sequence[TraceText], _cfg: Efficiency) -> list[MetricValue]:
    hold("efficiency")
    return [MetricValue(float(len(t.reasoning)), "chars") for t in traces]


HELD = TraceMetric("held_chars", "1", lambda _cfg: {}, _chars)
metric("held_chars_mean", unit="characters", direction=None, section="tests", stage="efficiency", stored=HELD,
       aggregate="mean", description="reasoning length; holds the efficiency stage when asked (tests)")


def _quality(g: Any, _cfg: Any) -> Any:
    def run(units: Sequence[Any]) -> list[Any]:
        hold("quality")
        return [row(u.trace_id, "held_quality_chars", g, float(len(u.reasoning))) for u in units]

    return run


register_quality_group(QualityGroup(
    "held_quality", (QualityMetric("held_quality_chars", "characters", None, "reasoning length (tests)"),),
    "1", lambda _cfg: ({}, "len"), _quality, order=910, description="reasoning length; holds when asked (tests)"))

_write_plots = files.write_plots


def _held_write_plots(data: Any, out: Path) -> list[str]:
    hold("report")
    return _write_plots(data, out)


files.write_plots = _held_write_plots
