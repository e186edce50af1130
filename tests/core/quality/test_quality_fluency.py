"""Sliding-window perplexity against a token-by-token computation, on a tiny random causal LM."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from legival_core.catalog import SMOLLM2
from legival_core.quality._local import Unavailable
from legival_core.quality.fluency import CausalLM, load_causal_lm, perplexity
from tests.core.quality.test_quality_consistency import WORDS, tiny_tokenizer_dir


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    d = tiny_tokenizer_dir(tmp_path_factory.mktemp("lm"))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=6 + len(WORDS), n_embd=16, n_layer=1, n_head=2, n_positions=64)).save_pretrained(
        str(d))
    loaded = load_causal_lm(str(d))
    assert not isinstance(loaded, Unavailable)
    return loaded


def _token_nll(lm: CausalLM, ids: list[int], begin: int, end: int, targets: range) -> float:
    """Sum of -log p(token t | tokens begin..t-1) for t in targets, from one forward pass on ids[begin:end]."""
    import torch

    with torch.inference_mode():
        logp = torch.log_softmax(lm.model(torch.tensor([ids[begin:end]])).logits[0], -1)
    return -sum(float(logp[t - begin - 1, ids[t]]) for t in targets)


def test_single_window_is_plain_perplexity(lm: CausalLM) -> None:
    text = "a b c one two three"
    ids = lm.tokenizer(text)["input_ids"]
    n = len(ids)
    # one window: HF's mean over the n-1 predictable tokens, weighted by trg_len = n as [repo] does
    expected = math.exp(_token_nll(lm, ids, 0, n, range(1, n)) / (n - 1))
    p = perplexity(text, lm)
    assert p.n_tokens == n and p.value == pytest.approx(expected, rel=1e-5)


def test_sliding_window_by_hand(lm: CausalLM) -> None:
    text = "a b c one two three is here so the answer"
    ids = lm.tokenizer(text)["input_ids"]
    assert len(ids) == 13
    # max_length 6, stride 3: windows (begin, end, targets) = (0,3,{0..2}) (0,6,{3..5}) (3,9,{6..8})
    # (6,12,{9..11}) (9,13,{12}); the first window's loss is a mean over its 2 predictable tokens
    nll = _token_nll(lm, ids, 0, 3, range(1, 3)) / 2 * 3
    nll += _token_nll(lm, ids, 0, 6, range(3, 6)) + _token_nll(lm, ids, 3, 9, range(6, 9))
    nll += _token_nll(lm, ids, 6, 12, range(9, 12)) + _token_nll(lm, ids, 9, 13, range(12, 13))
    assert perplexity(text, lm, max_length=6, stride=3).value == pytest.approx(math.exp(nll / 13), rel=1e-5)


def test_empty_text_has_no_perplexity(lm: CausalLM) -> None:
    assert perplexity("   ", lm).value is None


def test_missing_model_is_unavailable(tmp_path: Path) -> None:
    got = load_causal_lm(str(tmp_path / "nothing"))
    assert isinstance(got, Unavailable)


@pytest.mark.slow
def test_embedded_smollm2() -> None:
    lm = load_causal_lm()
    assert not isinstance(lm, Unavailable) and lm.model_id == SMOLLM2
    old = load_causal_lm("smollm2-135m-instruct")  # an older spelling loads the same model, under one name
    assert not isinstance(old, Unavailable) and old.model_id == SMOLLM2
    fluent = perplexity("The cat sat on the mat. It was a sunny day.", lm).value
    noise = perplexity("mat day sunny The on was cat. It sat the a.", lm).value
    assert fluent is not None and noise is not None and 1.0 < fluent < noise
