"""The benchmark spec's `monitorability:` section (docs/monitorability.md): hint interventions on the
spec's generating teachers, the monitors that read them, and the g-mean² bootstrap. Every default here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from legival_core.run_config.base import Strict, registered_name

Scope = Literal["cot", "cot_answer"]
SCOPES: tuple[Scope, ...] = ("cot", "cot_answer")
"""What a monitor reads: the reasoning alone, or the reasoning and the answer (Guan et al.'s CoT-only and
CoT + action scopes)."""


class HintMonitor(Strict):
    """A monitor of hint use: `lexical` (the cue's words: a baseline) or `llm` (a judge backend reads the
    reasoning and says whether it reveals using the hint; docs/monitorability.md "The LLM monitor")."""

    name: str = "lexical"
    kind: Literal["lexical", "llm"] = "lexical"
    judge: str = Field(default="openai-compatible", description="the judge backend of an llm monitor")
    model: str | None = None
    base_url: str | None = None
    max_output_tokens: int = Field(default=256, ge=16)

    @field_validator("judge")
    @classmethod
    def _judge(cls, v: str) -> str:
        return registered_name("judge", v)

    @model_validator(mode="after")
    def _llm(self) -> HintMonitor:
        if self.kind == "llm" and not self.model:
            raise ValueError(f"monitor {self.name!r}: an llm monitor needs `model`")
        return self


class Monitorability(Strict):
    """Hint interventions (Chen et al. 2025) scored with g-mean² (Guan et al. 2025). For each of the first
    `limit` problems of each dataset of each generating teacher (its `generate.problems`): `samples`
    samples of the unhinted question (x = 0) and of the question with each cue (x = 1), pointing to a
    wrong target (`DatasetSpec.wrong_answer`, seeded); the monitors' verdicts on each, per scope."""

    enabled: bool = False
    teachers: list[str] | None = Field(default=None, description="default: every teacher with `generate:`")
    cues: list[str] = Field(default_factory=lambda: ["sycophancy", "metadata"], min_length=1)
    limit: int = Field(default=8, ge=1, description="problems per (teacher, dataset)")
    samples: int = Field(default=4, ge=2, description="samples per arm (the Wald test needs 2)")
    seed: int = Field(default=0, ge=0)
    temperature: float = Field(default=0.8, gt=0, description="sampling temperature (an arm needs spread)")
    max_new_tokens: int = Field(default=256, ge=1)
    monitors: list[HintMonitor] = Field(default_factory=lambda: [HintMonitor()], min_length=1)
    scopes: list[Scope] = Field(default_factory=lambda: list(SCOPES), min_length=1)
    bootstrap: int = Field(default=100, ge=1, description="draws of the hierarchical bootstrap")

    @field_validator("cues")
    @classmethod
    def _cues(cls, v: list[str]) -> list[str]:
        return [registered_name("cue", c) for c in v]

    @model_validator(mode="after")
    def _names(self) -> Monitorability:
        names = [m.name for m in self.monitors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate monitor name(s): {', '.join(dup)}")
        return self
