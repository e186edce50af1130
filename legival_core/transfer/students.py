"""Build the backend a student config names, through the one registry."""

from __future__ import annotations

from legival_core.backends.base import TextBackend
from legival_core.registry import get
from legival_core.transfer.planner import DEFAULT_STUDENT_MODEL, StudentConfig


def make_student_backend(config: StudentConfig) -> TextBackend:
    factory = get("backend", config.backend)
    options = dict(config.backend_options)
    if config.backend in ("embedded", "vllm"):
        options.setdefault("dtype", config.dtype)
        if config.model != DEFAULT_STUDENT_MODEL:
            options.setdefault("model_dir" if config.backend == "embedded" else "model", config.model)
        options.setdefault("model_id", config.model)
    elif config.backend == "openai":
        options.setdefault("model", config.model)
    backend: TextBackend = factory(**options)
    return backend
