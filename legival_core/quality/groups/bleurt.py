"""BLEURT of answer vs trace (gCoT informativeness, `quality.informativeness`)."""

from __future__ import annotations

from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.group import (
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityMetric,
    pairwise,
    register_quality_group,
)
from legival_core.quality.informativeness import BLEURT_VERSION, load_bleurt

METRICS = (QualityMetric("bleurt", "score", "higher", "BLEURT of answer vs trace", "informativeness"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"ckpt": cfg.bleurt_ckpt}, cfg.bleurt_ckpt


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_bleurt(cfg.bleurt_ckpt)
    return score if isinstance(score, Unavailable) else pairwise(g, score)


BLEURT = register_quality_group(QualityGroup(
    "bleurt", METRICS, BLEURT_VERSION, key, load, order=18, description="BLEURT of answer vs trace"))
