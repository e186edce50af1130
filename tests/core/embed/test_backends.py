"""Every fp32 backend against today's path (sentence-transformers' `encode`, batch 32) on real traces:
each cosine r_i within 1e-4, so each trace's redundancy is today's (within 1e-4); the opt-in int8 path
is approximate and checked against the agreement docs/reports.md states."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from legival_core.catalog import MINILM
from legival_core.embed import Embedder, resolve_model_path
from legival_core.embed.runtimes import _tokens, sentence_transformer, token_batches
from legival_core.metrics.redundancy import max_prev_similarity, redundancy
from legival_core.segment import segment
from tests.conftest import EXAMPLES

BUNDLED = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"


def _traces(files: list[Path], every: int = 1) -> list[list[str]]:
    out = []
    for f in files:
        lines = [x for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
        out += [segment(str(json.loads(x).get("reasoning") or "")).sentences() for x in lines[::every]]
    return out


def _today(sentences: list[str]) -> np.ndarray:
    return _today_of(tuple(sentences)).copy()


@functools.cache
def _today_of(sentences: tuple[str, ...]) -> np.ndarray:
    """Today's vectors, computed once per set of sentences for the session (several backends are
    compared with the same reference)."""
    st = sentence_transformer(resolve_model_path(MINILM))
    out = st.encode(list(sentences), batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                    show_progress_bar=False)
    return np.asarray(out, dtype=np.float32)


def _per_trace(traces: list[list[str]], emb: np.ndarray) -> list[list[float]]:
    out, at = [], 0
    for t in traces:
        out.append(max_prev_similarity(emb[at : at + len(t)].copy()))
        at += len(t)
    return out


def _compare(traces: list[list[str]], backend: str, precision: str = "fp32") -> tuple[float, float, np.ndarray]:
    """(max |r_i - today's r_i|, max |redundancy - today's| per trace, cosine of each vector to today's)."""
    sentences = [s for t in traces for s in t]
    ref, new = _today(sentences), Embedder(MINILM, backend, precision).embed(sentences).vectors
    r_ref, r_new = _per_trace(traces, ref), _per_trace(traces, new)
    dr = max((abs(a - b) for x, y in zip(r_ref, r_new, strict=True) for a, b in zip(x, y, strict=True)), default=0.0)
    dred = max(abs(redundancy(x, 0.8) - redundancy(y, 0.8)) for x, y in zip(r_ref, r_new, strict=True))
    return dr, dred, np.sum(ref * new, axis=1)


@pytest.mark.parametrize("backend", ["torch", "onnx", "openvino", "auto"])
def test_fp32_backend_matches_todays_path_on_bundled_traces(backend: str) -> None:
    if backend == "openvino":
        pytest.importorskip("openvino", reason="the openvino backend is optional (pip install openvino)")
    traces = _traces([BUNDLED])
    dr, dred, cos = _compare(traces, backend)
    assert dr <= 1e-4 and dred <= 1e-4 and cos.min() > 1 - 1e-5


@pytest.mark.shared
def test_fp32_default_matches_todays_path_on_developer_traces(shared_data: Path) -> None:
    files = sorted((shared_data / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    traces = _traces(files, every=12)  # ~190 traces, all five teachers
    dr, dred, _ = _compare(traces, "auto")
    assert dr <= 1e-4 and dred <= 1e-4


def test_int8_is_close_but_not_equal() -> None:
    traces = _traces([BUNDLED])
    dr, dred, cos = _compare(traces, "onnx", "int8")
    assert 0 < dr < 0.2 and float(np.mean(cos)) > 0.99


def test_batches_hold_the_tokens_of_sentence_transformers_sorted_by_length() -> None:
    st = sentence_transformer(resolve_model_path(MINILM))
    sentences = ["Short.", "A somewhat longer sentence, with a clause.", "x " * 400, "Two words", "Short."]
    seen = []
    for idx, feats in token_batches(st, sentences, batch=2):
        lens = feats["attention_mask"].sum(axis=1)
        assert list(lens) == sorted(lens, reverse=True)
        for r, i in enumerate(idx):
            one = st.preprocess([sentences[i]])
            n = int(one["attention_mask"].sum())
            assert lens[r] == n and np.array_equal(feats["input_ids"][r, :n], one["input_ids"][0].numpy())
            seen.append(int(lens[r]))
    assert sorted(seen, reverse=True) == seen and max(seen) == 256  # truncated as sentence-transformers does


def test_the_direct_tokenizer_call_equals_preprocess_on_bundled_traces() -> None:
    st = sentence_transformer(resolve_model_path(MINILM))
    sentences = [s for t in _traces([BUNDLED]) for s in t] + ["  padded  ", "x " * 400, "\tTab\nnewline ÉCOLE"]
    fast, slow = _tokens(st, sentences, ("input_ids", "token_type_ids"), True), _tokens(
        st, sentences, ("input_ids", "token_type_ids"), False)
    assert fast[0] == slow[0]
    for a, b in zip(fast[1], slow[1], strict=True):
        assert all(np.array_equal(np.asarray(a[k]), b[k]) for k in ("input_ids", "token_type_ids"))
