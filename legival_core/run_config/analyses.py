"""The spec's `rewards:` and `monitor:` sections: reward-model scores (paper section 5.3, `legival rm`)
and the monitorability validation (`legival monitor`) as stages of the benchmark flow.

Both are off by default (`enabled: false`): they load models (8B reward models, a supervisor LM) that
a CPU demo does not want. Like every stage they compute only what the store lacks: reward scores per
(trace, model, parameters), verdicts per (supervisor, condition, trace, text). A reward model whose
weights are not installed stores `unavailable` rows (value empty) with the reason, which the report's
coverage shows; they are replaced by scores once the weights are there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from legival_core.catalog import canonical_model
from legival_core.monitor.supervisor import MAX_NEW_TOKENS
from legival_core.registry import entry
from legival_core.rewards.models import DEFAULT_MODELS, spec_default
from legival_core.run_config.base import Strict, check_name, default_of, registered_name, resolve_path
from legival_core.run_config.students import Student

if TYPE_CHECKING:
    from legival_core.rewards.models import RewardModelSpec


class RewardModel(Strict):
    """One reward model: `name` alone for a shipped default (`skywork-v2-llama-8b`, `rb2-llama-8b`,
    `qwen2.5-math-prm-7b`), else `name` with `model` (a hub id, loaded from the local Hugging Face
    cache, never downloaded) and `kind`; `path` points at a local copy of the weights."""

    name: str = Field(min_length=1)
    model: str | None = Field(default=None, description="hub id; default: the shipped default of that name")
    kind: Literal["scalar", "prm"] | None = Field(default=None, description="default: the default's, else scalar")
    path: Path | None = Field(default=None, description="local copy of the weights (or env LEGIVAL_RM_<NAME>)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "reward model name")

    @field_validator("path")
    @classmethod
    def _path(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return None if v is None else resolve_path(v, info)

    @model_validator(mode="after")
    def _known(self) -> RewardModel:
        if self.model is None and _default(self.name) is None:
            known = ", ".join(s.name for s in DEFAULT_MODELS)
            raise ValueError(f"reward model {self.name!r} is not a default ({known}); give its `model` (a hub id)")
        return self


class Rewards(Strict):
    """Reward-model scores of every trace (what `legival rm` runs). `models`: names of the defaults,
    hub ids, or {name, model, kind, path} entries (default: the three defaults)."""

    enabled: bool = False
    models: list[RewardModel] | None = Field(default=None, description="default: the three defaults")
    max_length: int = Field(default=spec_default("max_length"), ge=16, description=(
        "token limit of an RM input; a longer trace loses the head of its reasoning (part of the key)"))
    batch_size: int | None = Field(default=None, ge=1, description="traces per forward pass (default: the model's)")
    dtype: Literal["bfloat16", "float32"] = spec_default("dtype")
    limit: int | None = Field(default=None, ge=1, description="score at most N traces per model (trace-id order)")
    num_gpus: float | None = Field(default=None, ge=0, description=(
        "GPUs per reward-model worker when the stage runs on a Ray cluster (default: execution.gpus_per_engine)"))

    @field_validator("models", mode="before")
    @classmethod
    def _entries(cls, v: Any) -> Any:
        """A plain string is a default's name, or a hub id or local directory (named after its last part)."""
        if not isinstance(v, list):
            return v
        return [_entry(x) if isinstance(x, str) else x for x in v]

    @model_validator(mode="after")
    def _unique(self) -> Rewards:
        names = [m.name for m in self.models or []]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate reward model name(s): {', '.join(dup)}")
        return self

    def specs(self) -> list[RewardModelSpec]:
        """The library's reward-model specs, the section's settings applied."""
        from dataclasses import replace

        from legival_core.rewards.models import RewardModelSpec

        out = []
        for m in self.models if self.models is not None else [RewardModel(name=s.name) for s in DEFAULT_MODELS]:
            base = _default(m.name)
            if base is None or (m.model is not None and m.model != base.model):
                base = RewardModelSpec(m.name, str(m.model), kind=m.kind or "scalar")
            out.append(replace(base, kind=m.kind or base.kind, path=str(m.path) if m.path else base.path,
                               max_length=self.max_length, dtype=self.dtype,
                               batch_size=self.batch_size or base.batch_size))
        return out


def _default(name: str) -> RewardModelSpec | None:
    return next((s for s in DEFAULT_MODELS if name in (s.name, s.model)), None)


def _entry(text: str) -> dict[str, Any]:
    base = _default(text)
    if base is not None:
        return {"name": base.name}
    return {"name": text.rstrip("/").split("/")[-1].lower(), "model": text}


class Monitor(Strict):
    """The monitorability validation (what `legival monitor` runs): a weak supervisor says whether
    clean, sabotaged and naturally wrong traces are correct. `supervisor` names a spec student (its
    backend, model, dtype and options are used) or a model run on `backend` (`smollm2-135m`,
    `gemma-3-270m`, a hub id); its verdicts are stored under that name."""

    enabled: bool = False
    supervisor: str = Field(default=default_of(Student, "name"), min_length=1, description=(
        "a spec student's name, or a model on `backend` (the shipped CPU models by any accepted spelling)"))
    backend: str = Field(default=default_of(Student, "backend"),
                         description="backend of a supervisor that is not a spec student")
    model: str | None = Field(default=None, description="model id or local path (default: `supervisor`'s model)")
    dtype: str | None = Field(default=None, description="default: the backend's")
    backend_options: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(default=0, ge=0, description="seed of the error injection (part of the sabotaged texts)")
    limit: int | None = Field(default=None, ge=1, description="first N clean and N natural traces per (teacher, dataset)")
    max_new_tokens: int = Field(default=MAX_NEW_TOKENS, ge=1, description="token budget of a verdict")
    batch_size: int = Field(default=16, ge=1, description="items per supervisor call")
    num_gpus: float | None = Field(default=None, ge=0, description=(
        "GPUs of the supervisor worker on a Ray cluster (default: execution.gpus_per_engine)"))

    @field_validator("supervisor")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "supervisor name")

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return registered_name("backend", v)

    @model_validator(mode="after")
    def _dtype(self) -> Monitor:
        if self.dtype is None:
            return self
        allowed = getattr(entry("backend", self.backend).meta, "dtypes", None)
        if allowed and self.dtype not in allowed:
            raise ValueError(f"monitor: backend {self.backend!r} runs dtype {' | '.join(allowed)}, not {self.dtype!r}")
        return self

    def resolve(self, students: list[Student]) -> SupervisorModel:
        """The supervisor's backend, model, dtype and options: the student of that name (unless
        `model` is given), else `model` (default: `supervisor`, canonical spelling) on `backend`."""
        student = next((s for s in students if s.name == self.supervisor), None)
        if student is not None and self.model is None:
            return SupervisorModel(self.supervisor, student.backend, student.model, student.dtype,
                                   {**student.options(), **self.backend_options})
        return SupervisorModel(self.supervisor, self.backend, canonical_model(self.model or self.supervisor),
                               self.dtype, dict(self.backend_options))


@dataclass(frozen=True, slots=True)
class SupervisorModel:
    """A resolved supervisor: what `stages.monitor.BuildSupervisor` builds and what keys its verdicts."""

    name: str
    backend: str
    model: str
    dtype: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        """What the registered backends report as `model_id` for this model (the verdicts' key)."""
        return str(self.options.get("model_id") or self.model)
