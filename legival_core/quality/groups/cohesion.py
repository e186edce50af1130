"""Cohesion (gCoT coherence): embedding similarity of adjacent steps (`quality.cohesion`); step
vectors shared with the embedding cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from legival_core.catalog import canonical_model
from legival_core.embed import Embedder, resolve_model_path
from legival_core.quality._local import Unavailable
from legival_core.quality.cohesion import COHESION_VERSION, cohesion_from_embeddings
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
from legival_core.segment import SEGMENTER_VERSION

METRICS = (
    QualityMetric("cohesion", "score", "higher", "embedding cohesion of adjacent steps", "coherence"),
    QualityMetric("cohesion_band_ratio", "fraction", "higher", "share of adjacent steps in the cohesion band"),
)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    embed = canonical_model(cfg.embed_model)
    return {"model": embed, "segmenter": SEGMENTER_VERSION, **asdict(cfg.cohesion)}, embed


def load(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    try:
        resolve_model_path(cfg.embed_model)
    except RuntimeError as e:
        return Unavailable(cfg.embed_model, str(e))
    return CohesionComputer(g, cfg)


class CohesionComputer:
    """Cohesion of a chunk from its steps' embeddings: those in the shared cache (`QualityUnit.cached`,
    e.g. stored by the efficiency stage with the same model) are not computed again; the vectors it
    does compute wait in `drain_embeddings()` for the stage to store."""

    def __init__(self, g: Group, cfg: QualityConfig) -> None:
        self.g, self.cfg = g, cfg
        self.embedder = Embedder(cfg.embed_model, cfg.embed_backend)
        self._new: list[Row] = []

    def drain_embeddings(self) -> list[Row]:
        out, self._new = self._new, []
        return out

    def __call__(self, units: Sequence[QualityUnit]) -> list[Row]:
        import numpy as np

        g, cfg = self.g, self.cfg
        sents = {u.trace_id: [u.reasoning[a:b] for a, b in u.spans] for u in units}
        unique = list(dict.fromkeys(s for ss in sents.values() if len(ss) >= 2 for s in ss))
        index = {s: i for i, s in enumerate(unique)}
        res = self.embedder.embed(unique, {h: v for u in units for h, v in u.cached}) if unique else None
        emb = res.vectors if res is not None else np.zeros((0, 1), dtype=np.float32)
        if res is not None:
            self._new += res.cache_rows(self.embedder.key)
        rows: list[Row] = []
        for t, ss in sents.items():
            r = cohesion_from_embeddings(emb[[index[s] for s in ss]], cfg.cohesion) if len(ss) >= 2 else None
            if r is None:
                detail = {"n": len(ss), "reason": "fewer than 2 sentences"}
                rows += [row(t, "cohesion", g, None, "undefined", detail),
                         row(t, "cohesion_band_ratio", g, None, "undefined", detail)]
                continue
            d = {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(r).items()}
            rows += [row(t, "cohesion", g, r.cohesion, detail=d), row(t, "cohesion_band_ratio", g, r.band_ratio)]
        return rows


COHESION = register_quality_group(QualityGroup(
    "cohesion", METRICS, COHESION_VERSION, key, load, order=5, needs_steps=True,
    description="embedding cohesion of adjacent steps"))
