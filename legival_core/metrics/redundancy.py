"""Redundancy (SPEC section 3): the share of steps i >= 2 whose best cosine similarity to an earlier
step, r_i = max_{j<i} cos(e_i, e_j), exceeds tau (sentence embeddings, L2-normalised).

Embedding is the only expensive part, so it is split out: `max_prev_similarity` turns a trace's step
embeddings into r_i once (the efficiency stage stores them in `step_similarity`), and `redundancy` is
then a count over r for any threshold (the 21-value elbow sweep costs nothing more)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.metrics.base import TraceMetric, metric
from legival_core.segment import SEGMENTER_VERSION

if TYPE_CHECKING:
    import numpy as np

    from legival_core.metrics.base import Efficiency

REDUNDANCY_VERSION = "1"
SWEEP_THRESHOLDS: tuple[float, ...] = tuple(round(i / 20, 2) for i in range(21))


def max_prev_similarity(embeddings: np.ndarray) -> list[float]:
    """r_i = max_{j<i} cos(e_i, e_j) for i = 2..m, from L2-normalised rows (SPEC section 3).

    Returns m - 1 values (empty when m < 2): entry i-2 belongs to step i.
    """
    import numpy as np

    m = embeddings.shape[0]
    if m < 2:
        return []
    if m > MAX_STEPS:  # the trace fails alone (legival_core/stages/isolation.py), with this reason
        raise ValueError(f"{m:,} steps: over the {MAX_STEPS:,} the pairwise redundancy computes "
                         f"(m x m similarities); a degenerate trace")
    if m > BLOCK_ROWS:  # bounded memory: BLOCK_ROWS x m similarities at a time
        out: list[float] = []
        for lo in range(1, m, BLOCK_ROWS):
            hi = min(m, lo + BLOCK_ROWS)
            block = embeddings[lo:hi] @ embeddings[:hi].T
            block[np.arange(hi - lo)[:, None] <= np.arange(hi)[None, :] - lo] = -np.inf
            out += [float(x) for x in block.max(axis=1)]
        return out
    sims = embeddings @ embeddings.T
    # Row i keeps only columns j < i: mask the diagonal and everything after it.
    sims[np.triu_indices(m)] = -np.inf
    return [float(x) for x in sims[1:].max(axis=1)]


MAX_STEPS = 50_000
"""Steps past which a trace's redundancy is not computed (50k x 50k similarities: ~10 s of BLAS)."""
BLOCK_ROWS = 4096
"""Rows of the similarity matrix held at once past this many steps (the whole matrix below it)."""


def redundancy(max_prev: Sequence[float], tau: float) -> float:
    """#{i >= 2 : r_i > tau} / (m - 1); 0 when m < 2 (then `max_prev` is empty)."""
    if not max_prev:
        return 0.0
    return sum(1 for r in max_prev if r > tau) / len(max_prev)


def redundancy_sweep(max_prev: Sequence[float], thresholds: Sequence[float] = SWEEP_THRESHOLDS) -> list[float]:
    """Redundancy at each threshold: the data of the elbow report."""
    return [redundancy(max_prev, t) for t in thresholds]


def redundancy_params(cfg: Efficiency) -> dict[str, Any]:
    """What changes the value: model, segmenter, tau, and the embedding precision when not fp32 (fp32
    keys stay as they were before precision existed)."""
    p: dict[str, Any] = {"model": cfg.model, "segmenter": SEGMENTER_VERSION, "tau": cfg.tau}
    if cfg.embed_precision != "fp32":
        p["precision"] = cfg.embed_precision
    return p


def similarity_model(cfg: Efficiency) -> str:
    """The `step_similarity.model` of cfg's r_i: the model, marked when its vectors are not fp32."""
    return cfg.model if cfg.embed_precision == "fp32" else f"{cfg.model}#{cfg.embed_precision}"


REDUNDANCY = TraceMetric("redundancy", REDUNDANCY_VERSION, redundancy_params)
"""Computed by the efficiency stage's embedding pass (batched across traces, r_i cached)."""

metric("redundancy", unit="fraction", direction="lower", section="SPEC §3", stage="efficiency",
       stored=REDUNDANCY, order=130,
       description="share of steps nearly repeating an earlier one (cosine > tau), complete traces")
