"""Structural coherence: embedding cohesion, and Coherence-Momentum / cross-encoder adapters (gCoT paper).

The authors' embedding scorer (`characterization/automatic/coherence/coherence-embedding.py` in
sanchezgt/md-eval-cot, commit d9bb4c77) imports an `EmbeddingCoherence` class whose module is not in
the public repository, so the formula below is written from the paper's stated parameters (SPEC
section 6: K=2, gamma=0.75, 10 shuffles, penalties 0.30/0.90 with weights 0.5/0.5); its parts are
named so that a reader can check each against the paper.

With unit sentence embeddings e_1..e_n (n >= 2) and ``S_k = mean_i cos(e_i, e_{i+k})``:

- multi-hop similarity ``M = sum_{k=1..K, k<n} gamma^(k-1) S_k / sum_{k=1..K, k<n} gamma^(k-1)``;
- shuffle baseline B = mean of M over `n_perm` permutations of the sentences drawn from a fixed seed
  (a text whose order carries no information scores about 0);
- jump rate J = share of adjacent pairs with cos < 0.30 (topic jumps), repeat rate R = share with
  cos > 0.90 (near repetition);
- ``cohesion = M - B - (0.5 J + 0.5 R)``;
- band ratio (diagnostic, not in the score) = share of adjacent pairs with 0.30 <= cos <= 0.90.

The cross-encoder score is the authors' `coherence-all-mpnet.py`: one (question, trace) pair through
the CrossEncoder `enochlev/coherence-all-mpnet-base-v2`. Coherence-Momentum is the authors'
`coherence-momentum.py` degradation test: P(original scores above a shuffled copy), mean over K=10
shuffles, via a sigmoid of the score difference; its model (`aisingapore/coherence-momentum`) needs the
authors' scorer class, so here it takes any local scorer that maps a text to one coherence logit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model

if TYPE_CHECKING:
    import numpy as np

COHESION_VERSION = "cohesion-1"
MOMENTUM_VERSION = "momentum-1"
CROSS_ENCODER_VERSION = "cross-encoder-1"
DEFAULT_CROSS_ENCODER = "enochlev/coherence-all-mpnet-base-v2"
DEFAULT_MOMENTUM = "aisingapore/coherence-momentum"


@dataclass(frozen=True, slots=True)
class CohesionParams:
    hops: int = 2
    gamma: float = 0.75
    n_perm: int = 10
    seed: int = 0
    jump: float = 0.30
    repeat: float = 0.90
    w_jump: float = 0.5
    w_repeat: float = 0.5


@dataclass(frozen=True, slots=True)
class CohesionResult:
    cohesion: float
    multi_hop: float
    baseline: float
    jump_rate: float
    repeat_rate: float
    band_ratio: float
    mean_adjacent: float
    n: int


def multi_hop_similarity(emb: np.ndarray, hops: int, gamma: float) -> float:
    import numpy as np

    n = emb.shape[0]
    num = den = 0.0
    for k in range(1, min(hops, n - 1) + 1):
        s_k = float(np.mean(np.sum(emb[:-k] * emb[k:], axis=1)))
        w = gamma ** (k - 1)
        num += w * s_k
        den += w
    return num / den


def cohesion_from_embeddings(emb: np.ndarray, p: CohesionParams = CohesionParams()) -> CohesionResult | None:
    """The cohesion of one trace from its L2-normalised sentence embeddings; None below 2 sentences."""
    import numpy as np

    n = emb.shape[0]
    if n < 2:
        return None
    m = multi_hop_similarity(emb, p.hops, p.gamma)
    rng = np.random.default_rng(p.seed)
    base = float(np.mean([multi_hop_similarity(emb[rng.permutation(n)], p.hops, p.gamma) for _ in range(p.n_perm)]))
    adj = np.sum(emb[:-1] * emb[1:], axis=1)
    j = float(np.mean(adj < p.jump))
    r = float(np.mean(adj > p.repeat))
    band = float(np.mean((adj >= p.jump) & (adj <= p.repeat)))
    return CohesionResult(m - base - (p.w_jump * j + p.w_repeat * r), m, base, j, r, band, float(np.mean(adj)), n)


# ------------------------------------------------------------------ adapters over optional models


@dataclass(frozen=True, slots=True)
class MomentumResult:
    mean_prob: float
    std: float
    n: int


def coherence_momentum(
    sentences: Sequence[str], score: Callable[[list[str]], list[float]], k: int = 10, seed: int = 0, tau: float = 1.0
) -> MomentumResult | None:
    """P(original beats a shuffled copy) = mean over k shuffles of sigmoid((s_orig - s_shuf) / tau)."""
    import math

    import numpy as np

    if len(sentences) < 2:
        return None
    rng = np.random.default_rng(seed)
    texts = [" ".join(sentences)] + [" ".join(sentences[i] for i in rng.permutation(len(sentences))) for _ in range(k)]
    s = score(texts)
    probs = [1.0 / (1.0 + math.exp(-(s[0] - x) / tau)) for x in s[1:]]
    return MomentumResult(float(np.mean(probs)), float(np.std(probs)), len(probs))


def load_momentum_scorer(model: str = DEFAULT_MOMENTUM) -> Callable[[list[str]], list[float]] | Unavailable:
    """A local sequence-classification export of the momentum model (one logit per text)."""
    path = local_model_dir(model)
    if path is None:
        return missing_model(model, "download it on a connected machine and pass its directory")
    from legival_core.quality.consistency import load_classifier

    clf = load_classifier(str(path))
    if isinstance(clf, Unavailable):
        return clf
    n_labels = int(getattr(clf.model.config, "num_labels", 1))
    if n_labels != 1:  # a 2-label export would be scored on its class 0 (often "incoherent"): direction flipped
        return Unavailable(model, f"expects one coherence logit per text; this model has {n_labels} labels")

    def score(texts: list[str]) -> list[float]:
        return [float(row[0]) for row in clf.logits([(t, None) for t in texts])]

    return score


def load_cross_encoder(model: str = DEFAULT_CROSS_ENCODER) -> Callable[[str, str], float] | Unavailable:
    if not has_module("sentence_transformers"):
        return Unavailable(model, "pip install sentence-transformers")
    path = local_model_dir(model)
    if path is None:
        return missing_model(model, "download it on a connected machine and pass its directory")
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(path), device="cpu")

    def score(question: str, trace: str) -> float:
        return float(ce.predict([[question, trace]])[0])

    return score
