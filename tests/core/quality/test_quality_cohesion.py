"""Embedding cohesion against values worked out by hand (on toy vectors, and end to end on all-mpnet-base-v2
embeddings of two short traces); the optional-model adapters' unavailable paths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from legival_core.catalog import MPNET
from legival_core.embed import resolve_model_path
from legival_core.quality._local import Unavailable
from legival_core.quality.cohesion import (
    CohesionParams,
    coherence_momentum,
    cohesion_from_embeddings,
    load_cross_encoder,
    load_momentum_scorer,
    multi_hop_similarity,
)
from legival_core.segment import segment
from legival_core.stages.ingest import ingest_records
from legival_core.stages.quality import compute_quality
from legival_core.store import Store
from tests._sql import rows
from tests.conftest import EXAMPLES

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


# Two short traces through the quality stage (Punkt steps, all-mpnet-base-v2 on its default backend),
# against cosines of the model's own `SentenceTransformer.encode` and the paper's formula by hand.
TEXTS = {
    "apples": ["Tom has 3 apples.", "He buys 2 more apples at the store.", "Now Tom has 5 apples."],
    "jump": ["The train leaves the station at 9 am.", "Bananas are a yellow fruit.",
             "The train arrives in the city at noon."],
}


def _by_hand(c: np.ndarray) -> tuple[float, float]:
    """(cohesion, band ratio) of 3 sentences with pairwise cosines `c`: K=2, gamma=0.75, 10 shuffles
    from seed 0, jump < 0.30 and repeat > 0.90 each weighted 0.5."""

    def m(order: list[int]) -> float:
        a, b, d = order
        return ((c[a, b] + c[b, d]) / 2 + 0.75 * c[a, d]) / 1.75

    rng = np.random.default_rng(0)
    baseline = sum(m([int(i) for i in rng.permutation(3)]) for _ in range(10)) / 10
    adjacent = [c[0, 1], c[1, 2]]
    jumps = sum(x < 0.30 for x in adjacent) / 2
    repeats = sum(x > 0.90 for x in adjacent) / 2
    band = sum(0.30 <= x <= 0.90 for x in adjacent) / 2
    return m([0, 1, 2]) - baseline - 0.5 * jumps - 0.5 * repeats, band


def test_cohesion_rows_equal_the_paper_formula_on_mpnet_embeddings(store: Store, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    lines = (EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    records = [{**json.loads(line), "reasoning": " ".join(s)} for line, s in zip(lines, TEXTS.values(), strict=True)]
    for r, s in zip(records, TEXTS.values(), strict=True):
        assert segment(r["reasoning"]).sentences() == s  # the steps the stage embeds
    ingest_records(store, str(tmp_path / "two.jsonl"), records)
    assert compute_quality(store, ["cohesion"]).computed["cohesion"] == 2

    model = SentenceTransformer(resolve_model_path(MPNET), device="cpu")
    expected = {}
    for sentences in TEXTS.values():
        e = np.asarray(model.encode(sentences, normalize_embeddings=True), dtype=np.float64)
        expected[" ".join(sentences)] = (e @ e.T, _by_hand(e @ e.T))
    assert expected[" ".join(TEXTS["jump"])][0][0, 1] < 0.30  # a topic jump: the penalty is exercised

    got = rows(store, """
        SELECT t.reasoning, m.metric, m.value, m.method, m.params FROM trace_metrics m JOIN traces t USING (trace_id)
        WHERE m.metric IN ('cohesion', 'cohesion_band_ratio') AND m.status = 'ok' ORDER BY 1, 2""")
    assert len(got) == 4
    for text, metric, value, method, params in got:
        _, (cohesion, band) = expected[text]
        assert value == pytest.approx(cohesion if metric == "cohesion" else band, abs=1e-5)
        assert method == MPNET and json.loads(params)["model"] == MPNET


def _tiny_classifier(path: Path, num_labels: int) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from tests.core.quality.test_quality_consistency import WORDS, tiny_tokenizer_dir

    d = tiny_tokenizer_dir(path)
    cfg = BertConfig(  # type: ignore[call-arg]
        vocab_size=6 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=num_labels)
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(str(d))
    return d


def test_momentum_and_cross_encoder_tiny_models_through_the_real_loaders(tmp_path: Path) -> None:
    """Momentum scores each text by its one coherence logit; the cross-encoder scores (question, trace)
    with sigmoid(logit) (sentence-transformers' CrossEncoder on a 1-label model, as the authors'
    script); both equal an independent forward pass. A 2-label export is not a momentum scorer."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    d = _tiny_classifier(tmp_path / "one", 1)
    tok, ref = AutoTokenizer.from_pretrained(str(d)), BertForSequenceClassification.from_pretrained(str(d))
    texts = ["a one. b two.", "b two three so the answer is x."]
    with torch.inference_mode():
        single = [float(ref(**tok(t, return_tensors="pt")).logits[0, 0]) for t in texts]
        pair = float(ref(**tok(texts[0], texts[1], return_tensors="pt")).logits[0, 0])
    momentum = load_momentum_scorer(str(d))
    assert not isinstance(momentum, Unavailable)
    assert momentum(texts) == pytest.approx(single, abs=1e-5)
    cross = load_cross_encoder(str(d))
    assert not isinstance(cross, Unavailable)
    assert cross(texts[0], texts[1]) == pytest.approx(1 / (1 + math.exp(-pair)), abs=1e-5)

    two = load_momentum_scorer(str(_tiny_classifier(tmp_path / "two", 2)))
    assert isinstance(two, Unavailable) and "2 labels" in two.reason
