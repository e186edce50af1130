"""Students of a benchmark spec: a model on a registered backend, and how it decodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator

from legival_core.catalog import SMOLLM2, canonical_model
from legival_core.registry import entry
from legival_core.run_config.base import (
    SpecError,
    Strict,
    check_name,
    optional_file,
    registered_name,
)
from legival_core.run_config.sections import Transfer
from legival_core.transfer.rollout_plan import Mode, StudentConfig


class Decoding(Strict):
    max_new_tokens: int | None = Field(default=None, ge=1, description="default: transfer.max_new_tokens")
    forcing_max_tokens: int = Field(default=100, ge=1, description="budget of the forcing pass")


class Student(Strict):
    """A student: `model` on `backend` (any registered backend; `legival list backends`). `dtype`
    is part of the student's identity (its key) and must be one the backend runs."""

    name: str = Field(default="smollm2-135m", min_length=1)
    backend: str = "embedded"
    model: str = SMOLLM2
    dtype: str = "float32"
    decoding: Decoding = Decoding()
    backend_options: dict[str, Any] = Field(default_factory=dict)
    engine_config: Path | None = Field(default=None, description="YAML of backend options (infra/vllm/*.yaml)")
    mode: Mode = Field(default="continue", description="continue (transfer) or early_answer (Lanham et al. "
                       "2023: the answer forced right after the prefix; rows in `early_answers`, docs/transfer.md)")
    teachers: list[str] | None = Field(default=None, description="only these teachers' traces (default: all); "
                                       "the teacher's own model as an early-answer reader reads its own")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "student name")

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return registered_name("backend", v)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return canonical_model(v)

    @field_validator("engine_config")
    @classmethod
    def _engine_config(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return optional_file(v, info, "engine config")

    @model_validator(mode="after")
    def _dtype(self) -> Student:
        allowed = getattr(entry("backend", self.backend).meta, "dtypes", None)
        if allowed and self.dtype not in allowed:
            raise ValueError(f"student {self.name!r}: backend {self.backend!r} runs dtype "
                             f"{' | '.join(allowed)}, not {self.dtype!r}")
        return self

    def options(self) -> dict[str, Any]:
        """Backend options: the engine config file's, overridden by inline `backend_options`."""
        base: dict[str, Any] = {}
        if self.engine_config is not None:
            loaded = yaml.safe_load(self.engine_config.read_text(encoding="utf-8")) or {}
            if not isinstance(loaded, dict):
                raise SpecError(f"{self.engine_config}: an engine config is a mapping of backend options")
            base = dict(loaded)
        return {**base, **self.backend_options}

    def config(self, transfer: Transfer) -> StudentConfig:
        """The library's student config: decoding from the student, budgets from `transfer`."""
        return StudentConfig(
            name=self.name,
            backend=self.backend,
            model=self.model,
            dtype=self.dtype,
            max_new_tokens=self.decoding.max_new_tokens or transfer.max_new_tokens,
            forcing_max_tokens=self.decoding.forcing_max_tokens,
            step_interval=transfer.step_interval,
            n_bins=transfer.n_bins,
            profile=transfer.profile,
            backend_options=self.options(),
            mode=self.mode,
        )

    def reads(self, teacher: str) -> bool:
        """Whether this student rolls out on `teacher`'s traces (`teachers`, default all)."""
        return self.teachers is None or teacher in self.teachers


def student_config(transfer: Transfer | None = None, **fields: Any) -> StudentConfig:
    """A StudentConfig from the spec's defaults with `fields` overriding (the CLI's and the tests'
    way to build one): `max_new_tokens`, `step_interval`, `profile`, `n_bins` go to `transfer`,
    the rest to the `Student`."""
    t_keys = {"max_new_tokens", "step_interval", "profile", "n_bins"}
    t = (transfer or Transfer()).model_copy(update={k: v for k, v in fields.items() if k in t_keys})
    sfields = {k: v for k, v in fields.items() if k not in t_keys}
    forcing = sfields.pop("forcing_max_tokens", None)
    if forcing is not None:
        sfields["decoding"] = Decoding(forcing_max_tokens=forcing)
    return Student.model_validate(sfields, context={"check_files": False}).config(t)


EARLY_PREFIX = "early-"
"""The name of a teacher's own early-answer reader: `early-<teacher>` (`early_readers`)."""


def early_readers(teachers: list[Any], students: list[Student]) -> tuple[list[Student], dict[str, str]]:
    """`transfer.early_answering`: per teacher whose `generate` model runs here as a text backend (its
    weights: embedded, vLLM, a plugin), the early-answer reader `early-<teacher>` on that model, reading
    that teacher's traces only; a student of that name in the spec wins. Also, per teacher left out, why
    (no `generate`: its model is unknown; a chat endpoint: no raw prefix to continue)."""
    taken = {st.name for st in students}
    out: list[Student] = []
    skipped: dict[str, str] = {}
    for t in teachers:
        g = t.generate
        if g is None:
            skipped[t.name] = ("no `generate:` (its model is not known here); list an early-answer reader in "
                               "`students:` with `mode: early_answer, teachers: [NAME]`")
            continue
        info = entry("backend", g.backend).meta
        if getattr(info, "chat_teacher", False):
            skipped[t.name] = f"its model runs behind a chat endpoint ({g.backend}): no raw prefix to answer from"
            continue
        name = f"{EARLY_PREFIX}{t.name}"
        if name in taken:
            continue
        options = dict(g.backend_options)
        allowed = tuple(getattr(info, "dtypes", ()) or ())
        dtype = str(options.pop("dtype", "float32"))
        if allowed and dtype not in allowed:
            dtype = allowed[0]
        out.append(Student.model_validate({"name": name, "backend": g.backend, "model": g.model, "dtype": dtype,
                                           "backend_options": options, "mode": "early_answer",
                                           "teachers": [t.name]}, context={"check_files": False}))
    return out, skipped
