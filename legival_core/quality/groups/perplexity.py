"""Perplexity under a small causal LM (gCoT coherence, `quality.fluency`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.catalog import canonical_model
from legival_core.quality._local import Unavailable
from legival_core.quality.fluency import PERPLEXITY_VERSION, load_causal_lm, perplexity
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

METRICS = (QualityMetric("perplexity", "perplexity", "lower", "perplexity under a small causal LM", "coherence"),)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    ppl = canonical_model(cfg.ppl_model)
    return {"model": ppl, "max_length": cfg.ppl_max_length, "stride": cfg.ppl_stride}, ppl


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    lm = load_causal_lm(cfg.ppl_model)
    if isinstance(lm, Unavailable):
        return lm

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows = []
        for u in units:
            p = perplexity(u.reasoning, lm, cfg.ppl_max_length, cfg.ppl_stride)
            rows.append(row(u.trace_id, "perplexity", g, p.value, "ok" if p.value is not None else "undefined",
                            {"n_tokens": p.n_tokens}))
        return rows

    return run


PERPLEXITY = register_quality_group(QualityGroup(
    "perplexity", METRICS, PERPLEXITY_VERSION, key, load, order=16, description="causal-LM perplexity"))
