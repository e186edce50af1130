"""AlignScore (gCoT consistency): S_support (question -> trace) and S_imp (trace -> response),
`quality.alignscore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.quality._local import Unavailable
from legival_core.quality.alignscore import ALIGNSCORE_VERSION, align_both, load_alignscore
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
    QualityMetric("alignscore_imp", "score", "higher", "AlignScore S_imp: the trace implies the response",
                  "consistency"),
    QualityMetric("alignscore_support", "score", "higher", "AlignScore S_support: the question supports the trace"),
)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"ckpt": cfg.alignscore_ckpt, "backbone": cfg.alignscore_backbone, "mode": "nli_sp"}, cfg.alignscore_ckpt


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    scorer = load_alignscore(cfg.alignscore_ckpt, cfg.alignscore_backbone)
    if isinstance(scorer, Unavailable):
        return scorer

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = align_both(u.question, u.reasoning, u.answer_text, scorer.score)
            rows += [row(u.trace_id, "alignscore_support", g, s.support,
                         detail=None if s.support is not None else {"reason": "empty trace"}),
                     row(u.trace_id, "alignscore_imp", g, s.imp,
                         detail=None if s.imp is not None else {"reason": "no response after the trace"})]
        return rows

    return run


ALIGNSCORE = register_quality_group(QualityGroup(
    "alignscore", METRICS, ALIGNSCORE_VERSION, key, load, order=13, description="AlignScore S_imp and S_support"))
