"""A student's tokenizer without its weights, for counting prompt tokens before a run (`legival plan`).

The backends count prompt tokens with the model's own tokenizer (`tokenizer(prompt,
add_special_tokens=False)` on the chat-rendered prompt); the plan uses the same tokenizer when it is
on this machine: a `tokenizer_dir` or `model_dir` backend option, a shipped model (its exported
directory, or SmolLM2's tokenizer inside its GGUF, which loads no weights), or a hub id already in the
local cache. Nothing is downloaded. When none is found the caller falls back to an estimate and
says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legival_core.backends.shipped import (
    ModelNotInstalled,
    ShippedModel,
    export_path,
    is_complete_export,
    shipped_model,
    smollm2_gguf_path,
    tokenizer_dir,
)
from legival_core.catalog import SMOLLM2


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
    shipped = shipped_model(model)
    if shipped is not None:
        return _shipped_tokenizer(shipped)
    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True), f"tokenizer of {model} (local cache)"
    except (OSError, ValueError):
        return None, f"the tokenizer of {model} is not on this machine"


def _shipped_tokenizer(shipped: ShippedModel) -> tuple[Any | None, str]:
    """The exported directory's tokenizer; else SmolLM2's tokenizer read from its GGUF (no weights
    loaded); else (a base model such as Gemma, whose tokenizer is saved without the GGUF's chat
    template) its tokenizer alone, read from the GGUF once and cached (`shipped.tokenizer_dir`)."""
    from transformers import AutoTokenizer

    exported = export_path(shipped)
    if is_complete_export(exported):
        return AutoTokenizer.from_pretrained(str(exported)), f"tokenizer of {shipped.name}"
    if shipped.name != SMOLLM2:
        try:
            return AutoTokenizer.from_pretrained(str(tokenizer_dir(shipped))), f"tokenizer of {shipped.name}"
        except ModelNotInstalled as e:
            return None, str(e)
    try:
        gguf = smollm2_gguf_path()
    except ModelNotInstalled as e:
        return None, str(e)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name), f"tokenizer of {SMOLLM2} (GGUF)"
