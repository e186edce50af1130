"""A per-trace efficiency metric that raises on some traces (loaded through `LEGIVAL_PLUGINS`, in a
process of its own): the stage driver's per-unit isolation (legival_core/stages/isolation.py) must
store those traces as failed and compute every other one. `LEGIVAL_TEST_POISON` is the marker that
poisons a trace whose reasoning holds it ("" or unset: nothing is poisoned, the bug is fixed)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.metrics.base import MetricValue, TraceMetric, TraceText, metric
from legival_core.quality.group import QualityGroup, QualityMetric, register_quality_group

if TYPE_CHECKING:
    from legival_core.run_config import Efficiency


def _chars(traces: Sequence[TraceText], _cfg: Efficiency) -> list[MetricValue]:
    marker = os.environ.get("LEGIVAL_TEST_POISON", "")
    for t in traces:
        if marker and marker in t.reasoning:
            raise ValueError(f"poisoned trace {t.trace_id[:8]}")
    return [MetricValue(float(len(t.reasoning)), "chars") for t in traces]


POISONED = TraceMetric("poisoned_chars", "1", lambda _cfg: {}, _chars)

metric("poisoned_chars_mean", unit="characters", direction=None, section="tests", stage="efficiency",
       stored=POISONED, aggregate="mean", description="reasoning length; raises on poisoned traces (tests)")


def _quality_load(g: Any, _cfg: Any) -> Any:
    """A quality computer: the reasoning's length, raising on poisoned traces."""
    from legival_core.quality.group import row

    def run(units: Sequence[Any]) -> list[Any]:
        marker = os.environ.get("LEGIVAL_TEST_POISON", "")
        out = []
        for u in units:
            if marker and marker in u.reasoning:
                raise ValueError(f"poisoned trace {u.trace_id[:8]}")
            out.append(row(u.trace_id, "poisoned_quality_chars", g, float(len(u.reasoning))))
        return out

    return run


register_quality_group(QualityGroup(
    "poisoned_quality", (QualityMetric("poisoned_quality_chars", "characters", None, "reasoning length (tests)"),),
    "1", lambda _cfg: ({}, "len"), _quality_load, order=900,
    description="reasoning length; raises on poisoned traces (tests)"))
