"""Finding a model on THIS machine only: a local directory, or a copy already in the Hugging Face cache.

Nothing here downloads. A quality metric whose model is not found reports `Unavailable` (stored as a
row with status 'unavailable' and a NULL value), never a number from a substitute model.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a metric cannot run here, with what to install or point at to enable it."""

    model: str
    reason: str


def local_model_dir(model: str) -> Path | None:
    """`model` itself if it is a directory, else its snapshot in the local HF cache, else None."""
    p = Path(model).expanduser()
    if p.is_dir():
        return p
    if "/" not in model or p.is_absolute() or model.startswith("."):
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "not on this machine"
        return None


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def missing_model(model: str, install: str) -> Unavailable:
    return Unavailable(model, f"model {model!r} is not on this machine (no local directory, not in the "
                              f"Hugging Face cache); {install}")
