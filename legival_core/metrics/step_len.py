"""Step length (SPEC section 3): m, the number of non-blank Punkt sentences of the reasoning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.metrics.base import MetricValue, TraceMetric, TraceText, metric
from legival_core.segment import SEGMENTER_VERSION
from legival_core.types import Steps

if TYPE_CHECKING:
    from legival_core.metrics.base import Efficiency

STEP_LEN_VERSION = "1"


def step_len(steps: Steps) -> int:
    """m, the number of non-blank Punkt sentences."""
    return steps.m


def compute_step_len(traces: Sequence[TraceText], _cfg: Efficiency) -> list[MetricValue]:
    return [MetricValue(float(step_len(t.steps)), "punkt") for t in traces]


STEP_LEN = TraceMetric("step_len", STEP_LEN_VERSION, lambda _cfg: {"segmenter": SEGMENTER_VERSION}, compute_step_len)

metric("step_len_median", unit="steps", direction="lower", section="SPEC §3", stage="efficiency",
       stored=STEP_LEN, aggregate="median", order=120,
       description="median number of reasoning steps (Punkt sentences) of the complete traces")
