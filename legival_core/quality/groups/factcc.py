"""FactCC (gCoT consistency): consistency of the answer with the trace (`quality.consistency`)."""

from __future__ import annotations

from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.consistency import FACTCC_VERSION, load_factcc
from legival_core.quality.group import (
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityMetric,
    per_unit,
    register_quality_group,
)

METRICS = (QualityMetric("factcc", "probability", "higher", "FactCC consistency of the answer with the trace",
                         "consistency"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.factcc_model}, cfg.factcc_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_factcc(cfg.factcc_model)
    if isinstance(score, Unavailable):
        return score

    return per_unit(g, lambda u: score(u.reasoning, u.answer_text))


FACTCC = register_quality_group(QualityGroup(
    "factcc", METRICS, FACTCC_VERSION, key, load, order=15, description="FactCC answer-trace consistency"))
