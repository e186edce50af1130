"""Embedding cohesion against values worked out by hand; the optional-model adapters' unavailable paths."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from legival_core.quality._local import Unavailable
from legival_core.quality.cohesion import (
    CohesionParams,
    coherence_momentum,
    cohesion_from_embeddings,
    load_cross_encoder,
    load_momentum_scorer,
    multi_hop_similarity,
)

# cos(e1, e2) = 0.6, cos(e2, e3) = 0.8, cos(e1, e3) = 0
E = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])


def test_multi_hop_similarity() -> None:
    assert multi_hop_similarity(E, 2, 0.75) == pytest.approx((0.7 + 0.75 * 0.0) / 1.75)
    assert multi_hop_similarity(E[:2], 2, 0.75) == pytest.approx(0.6)  # only one hop exists


def test_cohesion_by_hand() -> None:
    r = cohesion_from_embeddings(E)
    assert r is not None
    # M of a permutation of 3 sentences depends only on which one sits in the middle
    by_middle = {1: 0.4, 0: (0.3 + 0.75 * 0.8) / 1.75, 2: (0.4 + 0.75 * 0.6) / 1.75}
    rng = np.random.default_rng(0)
    baseline = np.mean([by_middle[int(rng.permutation(3)[1])] for _ in range(10)])
    assert r.multi_hop == pytest.approx(0.4)
    assert r.baseline == pytest.approx(baseline)
    assert (r.jump_rate, r.repeat_rate, r.band_ratio, r.mean_adjacent, r.n) == pytest.approx((0, 0, 1, 0.7, 3))
    assert r.cohesion == pytest.approx(0.4 - baseline)


def test_jump_and_repeat_penalties() -> None:
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # adjacent cosines 1.0 (repeat) and 0.0 (jump)
    r = cohesion_from_embeddings(e, CohesionParams(n_perm=1))
    assert r is not None
    assert (r.jump_rate, r.repeat_rate, r.band_ratio) == (0.5, 0.5, 0.0)
    assert r.cohesion == pytest.approx(r.multi_hop - r.baseline - 0.5)
    assert cohesion_from_embeddings(e[:1]) is None


def test_momentum_degradation_test() -> None:
    seen: list[str] = []

    def score(texts: list[str]) -> list[float]:
        seen.extend(texts)
        return [float(len(t.split()[0])) for t in texts]

    sents = ["Alpha one.", "Be two.", "Gamma three."]
    r = coherence_momentum(sents, score, k=4)
    assert r is not None and r.n == 4 and seen[0] == "Alpha one. Be two. Gamma three."
    expected = [1 / (1 + math.exp(-(5 - len(t.split()[0])))) for t in seen[1:]]
    assert r.mean_prob == pytest.approx(np.mean(expected))
    assert coherence_momentum(["one."], score) is None


def test_adapters_report_unavailable_without_a_model(tmp_path: Path) -> None:
    for loaded in (load_cross_encoder(str(tmp_path / "none")), load_momentum_scorer("nobody/no-such-model")):
        assert isinstance(loaded, Unavailable) and "not on this machine" in loaded.reason
