"""FactCC (gCoT consistency): consistency of the answer with the trace (`quality.consistency`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.consistency import FACTCC_VERSION, load_factcc
from legival_core.quality.group import (
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityMetric,
    QualityUnit,
    Row,
    register_quality_group,
    row,
)

METRICS = (QualityMetric("factcc", "probability", "higher", "FactCC consistency of the answer with the trace",
                         "consistency"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.factcc_model}, cfg.factcc_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_factcc(cfg.factcc_model)
    if isinstance(score, Unavailable):
        return score

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        return [row(u.trace_id, "factcc", g, score(u.reasoning, u.answer_text)) for u in units]

    return run


FACTCC = register_quality_group(QualityGroup(
    "factcc", METRICS, FACTCC_VERSION, key, load, order=15, description="FactCC answer-trace consistency"))
