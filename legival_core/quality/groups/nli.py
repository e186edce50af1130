"""NLI consistency (gCoT consistency): contradiction of question vs steps and between nearby steps
(`quality.consistency`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.consistency import NLI_VERSION, load_nli, nli_consistency
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

METRICS = (
    QualityMetric("nli_q2s_mean", "score", "higher", "1 - mean NLI contradiction of question vs steps", "consistency"),
    QualityMetric("nli_q2s_max", "score", "higher", "1 - max NLI contradiction of question vs steps"),
    QualityMetric("nli_intra", "score", "higher", "1 - NLI contradiction between nearby steps", "consistency"),
    QualityMetric("nli_support", "score", "higher", "NLI support of the trace by the question"),
)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"model": cfg.nli_model, "window": cfg.nli_window}, cfg.nli_model


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    model = load_nli(cfg.nli_model)
    if isinstance(model, Unavailable):
        return model

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = nli_consistency(u.question, u.reasoning, model.probs, cfg.nli_window)
            t = u.trace_id
            rows += [row(t, "nli_q2s_mean", g, s.q2s_mean, detail={"n_sentences": s.n_sentences}),
                     row(t, "nli_q2s_max", g, s.q2s_max), row(t, "nli_intra", g, s.intra),
                     row(t, "nli_support", g, s.support)]
        return rows

    return run


NLI = register_quality_group(QualityGroup(
    "nli", METRICS, NLI_VERSION, key, load, order=9, description="NLI consistency of question and steps"))
