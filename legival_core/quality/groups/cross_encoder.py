"""Question-trace cross-encoder score (gCoT coherence, `quality.cohesion.load_cross_encoder`)."""

from __future__ import annotations

from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.cohesion import CROSS_ENCODER_VERSION, load_cross_encoder
from legival_core.quality.group import (
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityMetric,
    per_unit,
    register_quality_group,
)

METRICS = (QualityMetric("cross_encoder", "score", "higher", "question-trace cross-encoder score", "coherence"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.cross_encoder_model}, cfg.cross_encoder_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_cross_encoder(cfg.cross_encoder_model)
    if isinstance(score, Unavailable):
        return score

    return per_unit(g, lambda u: score(u.question, u.reasoning))


CROSS_ENCODER = register_quality_group(QualityGroup(
    "cross_encoder", METRICS, CROSS_ENCODER_VERSION, key, load, order=8,
    description="question-trace cross-encoder score"))
