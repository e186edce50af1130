"""Per-model generation settings: one YAML file per model under `configs/models/` (issue 7).

A file records the model card's recommended decoding (temperature, top_p, top_k, max tokens) and its
chat-template options (e.g. `enable_thinking`). The generate stage applies the recommended sampling
(seeded per problem) unless asked for greedy decoding, and records both `recommended` and `applied`
decoding (docs/generation.md); the cache key hashes only what was applied.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Family = Literal["think_tags", "harmony", "think_brackets", "reasoning_content", "none"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "models"


class Decoding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int | None = None
    max_new_tokens: int = Field(default=32768, ge=1)


class ModelConfig(BaseModel):
    """What to know to generate teacher traces with one model."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str = Field(description="hub id or local directory")
    family: Family = "none"
    decoding: Decoding = Field(default_factory=lambda: Decoding())
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str | None = Field(default=None, description="local tokenizer dir to render chat_template_kwargs")
    notes: str = ""


def config_dir() -> Path:
    return Path(os.environ.get("LEGIVAL_MODEL_CONFIGS", CONFIG_DIR))


def load_model_config(name: str | None, model: str | None = None) -> ModelConfig:
    """The config named `name` (a YAML path, a file stem in configs/models, or a config whose `model`
    equals `model`); a greedy default when nothing matches."""
    import yaml

    candidates: list[Path] = []
    for key in (name, model):
        if key and key.endswith((".yaml", ".yml")) and Path(key).is_file():
            candidates.append(Path(key))
    directory = config_dir()
    files = sorted(directory.glob("*.yaml")) if directory.is_dir() else []
    for key in (name, model):
        candidates += [f for f in files if key and f.stem == key]
    for path in candidates:
        return ModelConfig.model_validate(yaml.safe_load(path.read_text()))
    for f in files:
        cfg = ModelConfig.model_validate(yaml.safe_load(f.read_text()))
        if model and cfg.model == model:
            return cfg
    return ModelConfig(name=name or model or "unknown", model=model or name or "unknown")
