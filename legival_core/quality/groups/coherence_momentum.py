"""Coherence momentum (gCoT coherence): a shuffle-discrimination model's probability that the
sentences are in their order (`quality.cohesion.coherence_momentum`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.cohesion import MOMENTUM_VERSION, coherence_momentum, load_momentum_scorer
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
from legival_core.segment import segment

METRICS = (QualityMetric("coherence_momentum", "probability", "higher", "coherence-momentum model score",
                         "coherence"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.momentum_model, "k": 10, "seed": 0, "tau": 1.0}, cfg.momentum_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    score = load_momentum_scorer(cfg.momentum_model)
    if isinstance(score, Unavailable):
        return score

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows = []
        for u in units:
            r = coherence_momentum(segment(u.reasoning).sentences(), score)
            rows.append(row(u.trace_id, "coherence_momentum", g, None if r is None else r.mean_prob,
                            "ok" if r else "undefined", None if r is None else asdict(r)))
        return rows

    return run


COHERENCE_MOMENTUM = register_quality_group(QualityGroup(
    "coherence_momentum", METRICS, MOMENTUM_VERSION, key, load, order=7,
    description="coherence-momentum model score"))
