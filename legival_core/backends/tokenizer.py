"""A student's tokenizer without its weights, for counting prompt tokens before a run (`legival plan`).

The backends count prompt tokens with the model's own tokenizer (`tokenizer(prompt,
add_special_tokens=False)` on the chat-rendered prompt); the plan uses the same tokenizer when it is
on this machine: a `tokenizer_dir` or `model_dir` backend option, the shipped SmolLM2 (its exported
directory, or the tokenizer inside the GGUF, which loads no weights), or a hub id already in the
local cache. Nothing is downloaded. When none is found the caller falls back to an estimate and
says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legival_core.catalog import SMOLLM2, canonical_model


def local_tokenizer(model: str, options: Mapping[str, Any] | None = None) -> tuple[Any | None, str]:
    """(a transformers tokenizer or None, where it came from or why there is none)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    opts = dict(options or {})
    for key in ("tokenizer_dir", "model_dir"):
        if opts.get(key):
            path = Path(str(opts[key]))
            try:
                return AutoTokenizer.from_pretrained(str(path)), f"tokenizer of {path}"
            except (OSError, ValueError) as e:
                return None, f"backend option {key}={path} has no loadable tokenizer ({type(e).__name__})"
    if canonical_model(model) == SMOLLM2:
        return _smollm2_tokenizer()
    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True), f"tokenizer of {model} (local cache)"
    except (OSError, ValueError):
        return None, f"the tokenizer of {model} is not on this machine"


def _smollm2_tokenizer() -> tuple[Any | None, str]:
    from transformers import AutoTokenizer

    from legival_core.backends.smollm2 import (
        EXPORT_DIR_NAME,
        ModelNotInstalled,
        default_cache_dir,
        is_complete_export,
        smollm2_gguf_path,
    )

    exported = default_cache_dir() / "models" / EXPORT_DIR_NAME
    if is_complete_export(exported):
        return AutoTokenizer.from_pretrained(str(exported)), f"tokenizer of {SMOLLM2}"
    try:
        gguf = smollm2_gguf_path()
    except ModelNotInstalled as e:
        return None, str(e)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name), f"tokenizer of {SMOLLM2} (GGUF)"
