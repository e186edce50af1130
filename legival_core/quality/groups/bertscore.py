"""BERTScore F1 of answer vs trace (gCoT informativeness, `quality.informativeness`)."""

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
from legival_core.quality.informativeness import BERTSCORE_LAYER, BERTSCORE_VERSION, load_bertscore

METRICS = (QualityMetric("bertscore_f1", "score", "higher", "BERTScore F1 of answer vs trace (baseline-rescaled)",
                         "informativeness"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.bertscore_model, "layer": BERTSCORE_LAYER, "rescale": "baseline"}, cfg.bertscore_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_bertscore(cfg.bertscore_model)
    return score if isinstance(score, Unavailable) else pairwise(g, score)


BERTSCORE = register_quality_group(QualityGroup(
    "bertscore", METRICS, BERTSCORE_VERSION, key, load, order=17, description="BERTScore F1 of answer vs trace"))
