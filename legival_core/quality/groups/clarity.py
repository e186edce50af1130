"""Clarity (gCoT): CLX = mean(RD, SE, DC, SS_lite), from the text alone (`quality.clarity`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from legival_core.quality.clarity import CLARITY_VERSION, clarity
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
    QualityMetric("clarity_clx", "score", "higher", "clarity CLX = mean(RD, SE, DC, SS_lite)", "clarity"),
    QualityMetric("clarity_rd", "score", "higher", "readability (Flesch reading ease, scaled)"),
    QualityMetric("clarity_se", "score", "higher", "structural explicitness"),
    QualityMetric("clarity_dc", "score", "higher", "discourse connectives"),
    QualityMetric("clarity_ss", "score", "higher", "sentence simplicity (lite)"),
)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    ref = cfg.clarity_reference
    return ({"reference": {k: v for k, v in ref.as_dict().items() if k != "corpus"}, "ss_anchor": cfg.ss_anchor},
            f"regex-fre/{ref.ref_id}")


def load(g: Group, cfg: QualityConfig) -> Computer:
    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = clarity(u.reasoning, cfg.clarity_reference, cfg.ss_anchor)
            raw = {f.name: round(getattr(s.raw, f.name), 4) for f in fields(s.raw)}  # traces.parquet's clarity_raw_*
            for metric, v in (("clarity_clx", s.clx), ("clarity_rd", s.rd), ("clarity_se", s.se),
                              ("clarity_dc", s.dc), ("clarity_ss", s.ss_lite)):
                rows.append(row(u.trace_id, metric, g, v, detail=raw if metric == "clarity_clx" else None))
        return rows

    return run


CLARITY = register_quality_group(QualityGroup(
    "clarity", METRICS, CLARITY_VERSION, key, load, order=0,
    description="readability, structural explicitness, discourse connectives, sentence simplicity"))
