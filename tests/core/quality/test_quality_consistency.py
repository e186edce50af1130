"""NLI consistency: the scoring logic by hand, and a tiny random 3-label BERT through the real loader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from legival_core.quality._local import Unavailable
from legival_core.quality.alignscore import load_alignscore
from legival_core.quality.consistency import (
    load_factcc,
    load_nli,
    nli_consistency,
    normalize_math_md,
    split_sentences,
)
from legival_core.quality.informativeness import load_bertscore, load_bleurt

WORDS = ["a", "b", "c", "one", "two", "three", "is", "here", "so", "the", "answer", "q", "x", "y"]


def tiny_tokenizer_dir(path: Path) -> Path:
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(str(path))
    return path


def tiny_nli_dir(path: Path) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tiny_tokenizer_dir(path)
    torch.manual_seed(0)
    cfg = BertConfig(  # type: ignore[call-arg]
        vocab_size=6 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, num_labels=3,
                     id2label={0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"},
                     label2id={"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2})
    BertForSequenceClassification(cfg).eval().save_pretrained(str(path))
    return path


def test_normalisation_and_split() -> None:
    assert normalize_math_md("**So** $x+1$ is `3`.") == "So EQ is 3 ."
    assert split_sentences("A one. B two! c three.") == ["A one.", "B two! c three."]


def test_scores_by_hand() -> None:
    con = {("Q is here.", "A one."): 0.1, ("Q is here.", "B two."): 0.4, ("Q is here.", "C three."): 0.2,
           ("A one.", "B two."): 0.3, ("A one.", "C three."): 0.5, ("B two.", "C three."): 0.1}

    def probs(pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        c = np.array([con[p] for p in pairs])
        e = np.full(len(pairs), 0.5)
        return np.stack([e, c, 1 - e - c], axis=1)

    s = nli_consistency("Q is here.", "A one. B two. C three.", probs)
    assert s.n_sentences == 3
    assert s.q2s_max == pytest.approx(0.6)
    assert s.q2s_mean == pytest.approx(1 - 0.7 / 3)
    assert s.intra == pytest.approx(((1 - 0.3) + (1 - 0.5)) / 2)
    assert s.support == pytest.approx((0.5 - 0.7 / 3 + 1) / 2)
    assert nli_consistency("Q is here.", "A one. B two. C three.", probs, window=1).intra == pytest.approx(
        ((1 - 0.3) + (1 - 0.1)) / 2)
    empty = nli_consistency("Q.", "", probs)
    assert (empty.q2s_max, empty.q2s_mean, empty.intra) == (1.0, 1.0, 1.0)


def test_tiny_bert_through_the_real_loader(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    d = tiny_nli_dir(tmp_path / "nli")
    model = load_nli(str(d))
    assert not isinstance(model, Unavailable)
    assert model.order == (0, 2, 1)
    pairs = [("q is here.", "a one."), ("a one.", "b two three so the answer is x.")]
    p = model.probs(pairs)
    assert p.shape == (2, 3) and np.allclose(p.sum(axis=1), 1.0)
    tok, ref = AutoTokenizer.from_pretrained(str(d)), AutoModelForSequenceClassification.from_pretrained(str(d))
    with torch.inference_mode():
        for (a, b), row in zip(pairs, p, strict=True):
            q = torch.softmax(ref(**tok(a, b, return_tensors="pt")).logits[0], -1).numpy()
            assert row == pytest.approx([q[0], q[2], q[1]], abs=1e-5)
    s = nli_consistency("Q is here.", "A one. B two. C three.", model.probs)
    assert 0.0 <= s.intra <= 1.0 and 0.0 <= s.q2s_max <= s.q2s_mean <= 1.0


def test_unavailable_without_models(tmp_path: Path) -> None:
    for loaded in (load_nli("nobody/no-such-nli"), load_factcc(str(tmp_path / "x")), load_alignscore(),
                   load_bertscore(), load_bleurt()):
        assert isinstance(loaded, Unavailable), loaded
        assert loaded.reason


def test_a_two_label_model_is_not_nli(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    d = tiny_tokenizer_dir(tmp_path / "m")
    cfg = BertConfig(  # type: ignore[call-arg]
        vocab_size=6 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=2)
    BertForSequenceClassification(cfg).save_pretrained(str(d))
    got = load_nli(str(d))
    assert isinstance(got, Unavailable) and "not a 3-way NLI model" in got.reason


def test_factcc_tiny_bert_through_the_real_loader(tmp_path: Path) -> None:
    """FactCC = P(factual) renormalised over the factual/non-factual labels, on (trace, response) with
    the response through [factcc]'s EQ(..) normaliser; labels found by name (here in the reverse order
    of the real model, so a swapped index would show)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from legival_core.quality.informativeness import normalize_math_md as normalize_math_eq

    d = tiny_tokenizer_dir(tmp_path / "factcc")
    cfg = BertConfig(  # type: ignore[call-arg]
        vocab_size=6 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=2, id2label={0: "INCORRECT", 1: "CORRECT"},
        label2id={"INCORRECT": 0, "CORRECT": 1})
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(str(d))
    score = load_factcc(str(d))
    assert not isinstance(score, Unavailable)
    trace, response = "  a one. b two three so the answer is x.  ", "the answer is $x + 1$ so **x**"
    assert normalize_math_eq(response.strip()) == "the answer is EQ(x + 1) so **x**"
    tok, ref = AutoTokenizer.from_pretrained(str(d)), BertForSequenceClassification.from_pretrained(str(d))
    with torch.inference_mode():
        q = torch.softmax(ref(**tok(trace.strip(), normalize_math_eq(response.strip()), return_tensors="pt",
                                   truncation=True)).logits[0], -1).numpy()
    assert score(trace, response) == pytest.approx(q[1] / (q[0] + q[1]), abs=1e-5)


def test_bleurt_scores_with_the_checkpoint_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BLEURT runs the local checkpoint through `bleurt.score.BleurtScorer` (TensorFlow and BLEURT are
    not installable here, so the package is a stand-in module recording its calls): the directory
    given, references = the traces, candidates = the answers, both normalised."""
    import sys
    import types

    calls: list[tuple[str, object]] = []

    class Scorer:
        def __init__(self, checkpoint: str) -> None:
            calls.append(("init", checkpoint))

        def score(self, references: list[str], candidates: list[str]) -> list[float]:
            calls.append(("score", (references, candidates)))
            return [0.25 * (i + 1) for i in range(len(candidates))]

    pkg, mod = types.ModuleType("bleurt"), types.ModuleType("bleurt.score")
    mod.BleurtScorer = Scorer  # type: ignore[attr-defined]
    pkg.score = mod  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bleurt", pkg)
    monkeypatch.setitem(sys.modules, "bleurt.score", mod)
    monkeypatch.setattr("legival_core.quality.informativeness.has_module", lambda name: name == "bleurt")
    ckpt = tmp_path / "BLEURT-20"
    ckpt.mkdir()
    score = load_bleurt(str(ckpt))
    assert not isinstance(score, Unavailable)
    assert score(["it is $4$"], ["so 2 + 2 = $4$."]) == [0.25]
    assert calls == [("init", str(ckpt)), ("score", (["so 2 + 2 = EQ(4) ."], ["it is EQ(4)"]))]
