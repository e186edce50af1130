"""The embedder without a model: each distinct sentence is computed once, stored vectors are reused,
keys hold only what changes a vector, and it travels to another process before its model loads."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import numpy as np
import pytest

from legival_core.catalog import MINILM
from legival_core.embed import Embedder, embedding_key, from_bytes, sentence_hash, to_bytes
from legival_core.metrics.redundancy import redundancy_params, similarity_model
from legival_core.run_config import Efficiency


class Counting:
    """A runtime that returns a fixed unit vector per sentence and records what it was asked."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        self.calls.append(list(sentences))
        rows = [np.random.default_rng(len(s) * 7919 + sum(map(ord, s))).normal(size=8) for s in sentences]
        v = np.asarray(rows, dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def _embedder() -> tuple[Embedder, Counting]:
    e, rt = Embedder(MINILM), Counting()
    e._runtime = rt
    return e, rt


def test_repeats_are_computed_once_and_rows_follow_the_input() -> None:
    e, rt = _embedder()
    r = e.embed(["a b", "c", "a b", "c", "d"])
    assert rt.calls == [["a b", "c", "d"]] and r.encoded == 3 and r.reused == 0
    assert np.array_equal(r.vectors[0], r.vectors[2]) and np.array_equal(r.vectors[1], r.vectors[3])
    assert set(r.new) == {sentence_hash(s) for s in ("a b", "c", "d")}


def test_known_vectors_and_memory_are_not_computed_again() -> None:
    e, rt = _embedder()
    first = e.embed(["x", "y"])
    stored = {sentence_hash("z"): to_bytes(np.ones(8, dtype=np.float32) / np.sqrt(8))}
    r = e.embed(["y", "z", "w"], stored)
    assert rt.calls[-1] == ["w"] and r.reused == 2 and set(r.new) == {sentence_hash("w")}
    assert np.array_equal(r.vectors[0], first.vectors[1])
    assert np.allclose(r.vectors[1], from_bytes(stored[sentence_hash("z")]))


def test_memory_is_bounded() -> None:
    e = Embedder(MINILM, memo_limit=1)
    e._runtime = rt = Counting()
    e.embed(["p", "q"])
    e.embed(["p", "q"])
    assert rt.calls == [["p", "q"], ["q"]]


def test_pickles_without_its_model() -> None:
    e, _ = _embedder()
    e.embed(["loaded"])
    copy = pickle.loads(pickle.dumps(e))
    assert copy._runtime is None and copy._memo == {} and (copy.model, copy.backend, copy.precision) == (
        MINILM, "auto", "fp32")


def test_keys_hold_only_what_changes_a_vector() -> None:
    assert embedding_key(MINILM) == embedding_key(f"sentence-transformers/{MINILM}") == MINILM
    assert embedding_key(MINILM, "int8") == f"{MINILM}#int8"
    fp32, onnx, int8 = Efficiency(), Efficiency(embed_backend="onnx"), Efficiency(embed_precision="int8")
    # the backend never reaches a key; fp32 keys are those stored before precision existed
    assert redundancy_params(fp32) == redundancy_params(onnx) == {"model": MINILM, "segmenter": redundancy_params(
        fp32)["segmenter"], "tau": 0.8}
    assert similarity_model(fp32) == similarity_model(onnx) == MINILM
    assert redundancy_params(int8)["precision"] == "int8" and similarity_model(int8) == f"{MINILM}#int8"
    with pytest.raises(ValueError, match="known: auto"):
        Efficiency(embed_backend="tpu")
    with pytest.raises(ValueError, match="known: fp32"):
        Efficiency(embed_precision="fp16")
