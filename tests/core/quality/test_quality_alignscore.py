"""AlignScore both directions (S_support, S_imp) and BERTScore's baseline rescaling: the maths by hand,
and a tiny random RoBERTa AlignScore checkpoint through the real loader and the quality stage's computer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from legival_core.quality._local import Unavailable
from legival_core.quality.alignscore import (
    AlignScorer,
    align_both,
    context_chunks,
    load_alignscore,
    nli_sp,
    sentences,
)
from legival_core.quality.informativeness import baseline_file, normalize_math_md, read_baseline, rescale


def _sentence(word: str, n: int) -> str:
    return " ".join([word.capitalize()] + [word] * (n - 1)) + "."


def test_context_chunks_by_hand() -> None:
    short = "The cat sat. It ran away. Then it slept."
    assert sentences(short) == ["The cat sat.", "It ran away.", "Then it slept."]
    assert context_chunks(short) == [short]  # 8 words: one chunk of all three sentences
    six = [_sentence(w, 120) for w in ("alpha", "beta", "gamma", "delta", "eps", "zeta")]
    # 720 words -> 720 // 350 + 1 = 3 chunks wanted -> 6 // 3 = 2 sentences per chunk
    assert context_chunks(" ".join(six)) == [" ".join(six[0:2]), " ".join(six[2:4]), " ".join(six[4:6])]
    seven = [*six, _sentence("eta", 50)]
    # 770 words -> 3 wanted -> 7 // 3 = 2 per chunk -> 4 chunks, the last one short
    assert len(context_chunks(" ".join(seven))) == 4 and context_chunks(" ".join(seven))[-1] == seven[-1]
    assert context_chunks("") == [""]


def test_nli_sp_is_mean_over_claim_sentences_of_max_over_chunks() -> None:
    c1, c2 = _sentence("alpha", 200), _sentence("beta", 200)  # 400 words: 2 chunks of one sentence
    p = {("Alpha", "One two."): 0.2, ("Alpha", "Three four."): 0.9,
         ("Beta", "One two."): 0.7, ("Beta", "Three four."): 0.4}
    seen: list[tuple[str, str]] = []

    def aligned(pairs: Sequence[tuple[str, str]]) -> list[float]:
        seen.extend(pairs)
        return [p[c.split()[0], s] for c, s in pairs]

    got = nli_sp(f"{c1} {c2}", "One two. Three four.", aligned)
    assert got == pytest.approx((max(0.2, 0.7) + max(0.9, 0.4)) / 2)  # 0.8
    assert [(c.split()[0], s) for c, s in seen] == [("Alpha", "One two."), ("Alpha", "Three four."),
                                                    ("Beta", "One two."), ("Beta", "Three four.")]
    assert nli_sp("Some context.", "", aligned) is None


def test_both_directions() -> None:
    calls: list[tuple[str, str]] = []

    def score(context: str, claim: str) -> float:
        calls.append((context, claim))
        return 0.25 * len(calls)

    trace, response = "So $x = 3$ and \\(y\\) is 1,000.", "The answer is $3$."
    s = align_both("  What is x?  ", trace, response, score)
    b, r = normalize_math_md(trace), normalize_math_md(response)
    assert b == "So EQ(x = 3) and y is 1000." and r == "The answer is EQ(3) ."
    assert calls == [("What is x?", b), (b, r)] and (s.support, s.imp) == (0.25, 0.5)
    none = align_both("Q?", trace, "   ", score)
    assert none.imp is None and none.support == 0.75
    assert align_both("Q?", "", "A.", score) == type(s)(None, None)


# ------------------------------------------------------------------ a tiny random AlignScore checkpoint


def _byte_chars() -> list[str]:
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def tiny_alignscore(tmp: Path, max_len: int = 48) -> tuple[Path, Path]:
    """A roberta backbone directory (byte-level BPE without merges) and a Lightning-style checkpoint
    holding random `base_model.*`, `tri_layer.*` (and the unused heads) weights."""
    import torch
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    backbone = tmp / "roberta-tiny"
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
    for ch in _byte_chars():
        vocab.setdefault(ch, len(vocab))
    RobertaTokenizer(vocab=vocab, merges=[], model_max_length=max_len).save_pretrained(str(backbone))
    cfg = RobertaConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=max_len + 2, type_vocab_size=1)
    cfg.save_pretrained(str(backbone))
    torch.manual_seed(0)
    base = RobertaModel(cfg)
    state: dict[str, Any] = {f"base_model.{k}": v for k, v in base.state_dict().items()}
    for name, out in (("tri_layer", 3), ("bin_layer", 2), ("reg_layer", 1)):
        layer = torch.nn.Linear(16, out)
        torch.nn.init.normal_(layer.weight, std=2.0)
        state |= {f"{name}.weight": layer.weight.detach(), f"{name}.bias": layer.bias.detach()}
    ckpt = tmp / "tiny.ckpt"
    torch.save({"state_dict": state, "pytorch-lightning_version": "1.7.7",
                "hyper_parameters": {"model": "roberta-tiny"}}, str(ckpt))
    return ckpt, backbone


def _by_hand(ckpt: Path, backbone: Path, context: str, claim: str) -> float:
    """P(aligned) of one pair from the checkpoint's tensors, with no code of the module under test."""
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    state = torch.load(str(ckpt), weights_only=True)["state_dict"]
    model = RobertaModel(RobertaConfig.from_pretrained(str(backbone))).eval()
    model.load_state_dict({k.removeprefix("base_model."): v for k, v in state.items() if k.startswith("base_model.")})
    enc = AutoTokenizer.from_pretrained(str(backbone))(context, claim, return_tensors="pt")
    with torch.inference_mode():
        pooled = model(**enc).pooler_output
        logits = pooled @ state["tri_layer.weight"].T + state["tri_layer.bias"]
    return float(torch.softmax(logits, -1)[0, 0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_alignscore(tmp_path_factory.mktemp("align"))


def test_tiny_checkpoint_through_the_real_loader(tiny: tuple[Path, Path]) -> None:
    ckpt, backbone = tiny
    scorer = load_alignscore(str(ckpt), str(backbone), batch_size=2)
    assert isinstance(scorer, AlignScorer) and scorer.max_length == 48
    pairs = [("Q is 3.", "So x is 3."), ("Ann has two.", "Then one."), ("Q is 3.", "It is nine.")]
    got = scorer.aligned(pairs)  # two batches, padded to their longest pair
    assert got == pytest.approx([_by_hand(ckpt, backbone, c, s) for c, s in pairs], abs=1e-5)
    assert len(set(got)) == 3 and all(0.0 < p < 1.0 for p in got)
    context, claim = "Q is 3. Ann has two.", "So x is 3. Then one."
    chunk = context  # 5 words: one chunk
    expect = (_by_hand(ckpt, backbone, chunk, "So x is 3.") + _by_hand(ckpt, backbone, chunk, "Then one.")) / 2
    assert scorer.score(context, claim) == pytest.approx(expect, abs=1e-5)
    long_claim = "Nine " * 80 + "."  # longer than the 48-token limit alone: both sides are truncated
    assert 0.0 < scorer.aligned([("Q.", long_claim)])[0] < 1.0


def test_the_stage_writes_both_directions(tiny: tuple[Path, Path]) -> None:
    from legival_core.quality.group import QualityConfig, QualityUnit, group_defs, load_computer

    ckpt, backbone = tiny
    cfg = QualityConfig(alignscore_ckpt=str(ckpt), alignscore_backbone=str(backbone))
    g = group_defs(cfg)["alignscore"]
    assert json.loads(g.params) == {"backbone": str(backbone), "ckpt": str(ckpt), "mode": "nli_sp"}
    assert g.version == "alignscore-2" and g.metrics == ("alignscore_imp", "alignscore_support")
    run = load_computer(g, cfg)
    assert callable(run)
    scorer = load_alignscore(str(ckpt), str(backbone))
    assert isinstance(scorer, AlignScorer)
    units = [QualityUnit("t1", "gsm8k", "Ann has $2$ cats. So x is 3.", "The answer is 3.", "What is x?"),
             QualityUnit("t2", "gsm8k", "So x is 3.", "", "What is x?")]
    rows = {(r["trace_id"], r["metric"]): r for r in run(units)}
    trace, resp = normalize_math_md(units[0].reasoning), normalize_math_md(units[0].answer_text)
    assert rows["t1", "alignscore_support"]["value"] == pytest.approx(scorer.score("What is x?", trace), abs=1e-6)
    assert rows["t1", "alignscore_imp"]["value"] == pytest.approx(scorer.score(trace, resp), abs=1e-6)
    assert rows["t1", "alignscore_imp"]["status"] == "ok" and rows["t1", "alignscore_imp"]["method"] == str(ckpt)
    imp = rows["t2", "alignscore_imp"]
    assert (imp["value"], imp["status"]) == (None, "undefined")
    assert json.loads(imp["detail"]) == {"reason": "no response after the trace"}
    assert rows["t2", "alignscore_support"]["status"] == "ok"


def test_unavailable_alignscore(tmp_path: Path, tiny: tuple[Path, Path]) -> None:
    import torch

    ckpt, backbone = tiny
    missing = load_alignscore(str(tmp_path / "none.ckpt"), str(backbone))
    assert isinstance(missing, Unavailable) and "not found" in missing.reason
    no_backbone = load_alignscore(str(ckpt), str(tmp_path / "no-backbone"))
    assert isinstance(no_backbone, Unavailable) and "backbone" in no_backbone.reason
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {"classifier.weight": torch.zeros(2, 2)}}, str(other))
    got = load_alignscore(str(other), str(backbone))
    assert isinstance(got, Unavailable) and "not an AlignScore checkpoint" in got.reason
    partial = tmp_path / "partial.pt"
    state = torch.load(str(ckpt), weights_only=True)["state_dict"]
    torch.save({k: v for k, v in state.items() if "encoder.layer.0.output" not in k}, str(partial))
    got = load_alignscore(str(partial), str(backbone))
    assert isinstance(got, Unavailable) and "weights missing" in got.reason


# ------------------------------------------------------------------ BERTScore rescaling


def test_bertscore_baseline_rescaling_by_hand(tmp_path: Path) -> None:
    root = tmp_path / "rescale_baseline" / "en"
    (root / "microsoft").mkdir(parents=True)
    lines = ["LAYER,P,R,F"] + [f"{i},0.{i:02d},0.{i:02d}5,0.{i:02d}2" for i in range(48)]
    f = root / "microsoft" / "deberta-xlarge-mnli.tsv"
    f.write_text("\n".join(lines) + "\n")
    assert baseline_file("microsoft/deberta-xlarge-mnli", root) == f
    assert baseline_file("/models/deberta-xlarge-mnli", root) == f  # a local directory, by its name
    assert baseline_file("someone/other-model", root) is None
    assert read_baseline(f) == (0.40, 0.405, 0.402)  # row 40: bert-score's layer for this model
    assert read_baseline(f, 3) == (0.03, 0.035, 0.032)
    # (F - b) / (1 - b): F = 0.7, b = 0.402 -> 0.298 / 0.598
    assert rescale(0.7, 0.402) == pytest.approx(0.298 / 0.598)
    assert rescale(0.402, 0.402) == 0.0 and rescale(1.0, 0.402) == pytest.approx(1.0)
    assert rescale(0.3, 0.402) < 0.0  # below the baseline: negative, as bert-score reports it


def tiny_deberta_dir(path: Path, layers: int = 42) -> Path:
    """A random DeBERTa (v1, the architecture of microsoft/deberta-xlarge-mnli) with a byte-level BPE
    tokenizer of single bytes, saved where bert-score's baseline for that model is found by name."""
    import torch
    from transformers import DebertaConfig, DebertaModel, DebertaTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + list(bytes_to_unicode().values()))}
    DebertaTokenizer(vocab=vocab, merges=[], model_max_length=128).save_pretrained(str(path))
    torch.manual_seed(0)
    cfg = DebertaConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128, pad_token_id=0)
    DebertaModel(cfg).eval().save_pretrained(str(path))
    return path


def test_bertscore_through_bert_score_with_a_tiny_deberta(tmp_path: Path) -> None:
    """The real loader and the real bert-score package on a 42-layer random DeBERTa: the score is
    layer 40's greedy-matching F1 (special tokens in the matching, not in the averages), rescaled with
    row 40 of bert-score's own baseline file, of the normalised texts, each encoded with a leading
    space as bert-score does for GPT-2-style tokenizers (transformers 5's DeBERTa is no longer one)."""
    import bert_score
    import torch
    from transformers import AutoModel, AutoTokenizer

    from legival_core.quality.informativeness import load_bertscore

    d = tiny_deberta_dir(tmp_path / "deberta-xlarge-mnli")
    score = load_bertscore(str(d))
    assert not isinstance(score, Unavailable), score
    cands = ["The answer is $x+1$.", "So it is 3."]
    refs = ["First we add one to x, so the answer is x+1.", "Two and one make three."]
    got = score(cands, refs)

    tok = AutoTokenizer.from_pretrained(str(d))
    model = AutoModel.from_pretrained(str(d)).eval()

    def vectors(text: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids = tok.encode(" " + normalize_math_md(text).strip(), add_special_tokens=True)
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and ids[1] == tok.convert_tokens_to_ids("Ġ")
        with torch.no_grad():
            h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[40][0]
        h = h / h.norm(dim=-1, keepdim=True)
        weight = torch.ones(len(ids))
        weight[0] = weight[-1] = 0.0  # [CLS] and [SEP]: idf 0
        return h, weight

    base = baseline_file("microsoft/deberta-xlarge-mnli", Path(bert_score.__file__).parent / "rescale_baseline" / "en")
    assert base is not None
    b_f = read_baseline(base)[2]
    for c, r, value in zip(cands, refs, got, strict=True):
        hc, wc = vectors(c)
        hr, wr = vectors(r)
        sim = hc @ hr.T
        p = float((sim.max(dim=1).values * wc).sum() / wc.sum())
        rr = float((sim.max(dim=0).values * wr).sum() / wr.sum())
        f = 2 * p * rr / (p + rr)
        assert value == pytest.approx((f - b_f) / (1 - b_f), abs=1e-5)
    assert score([refs[0]], [refs[0]]) == pytest.approx([1.0], abs=1e-5)  # identical texts: F = 1 -> 1

    # the quality stage's computer: candidate = the answer after the trace, reference = the trace
    from legival_core.quality.group import QualityConfig, QualityUnit, group_defs, load_computer

    cfg = QualityConfig(bertscore_model=str(d))
    g = group_defs(cfg)["bertscore"]
    assert g.version == "bertscore-3" and g.metrics == ("bertscore_f1",)
    run = load_computer(g, cfg)
    assert callable(run)
    rows = run([QualityUnit("t1", "gsm8k", refs[0], cands[0], "What is it?")])
    assert [(r["trace_id"], r["metric"], r["status"]) for r in rows] == [("t1", "bertscore_f1", "ok")]
    assert rows[0]["value"] == pytest.approx(got[0], abs=1e-6)


def test_only_a_byte_level_tokenizer_gets_the_leading_space(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from legival_core.quality.informativeness import _with_prefix_space
    from tests.core.quality.test_quality_consistency import tiny_tokenizer_dir

    deberta = tiny_deberta_dir(tmp_path / "deberta-xlarge-mnli", layers=1)
    fixed = _with_prefix_space(AutoTokenizer.from_pretrained(str(deberta)), deberta)
    assert fixed.encode("one", add_special_tokens=False)[0] == fixed.convert_tokens_to_ids("Ġ")
    assert _with_prefix_space(fixed, deberta) is fixed  # already set: kept
    wordpiece_dir = tiny_tokenizer_dir(tmp_path / "bert")
    wordpiece = AutoTokenizer.from_pretrained(str(wordpiece_dir))
    assert _with_prefix_space(wordpiece, wordpiece_dir) is wordpiece
