"""Rollout planning (SPEC section 4): which prefixes a student sees, and exactly how.

Two profiles:
- `spec` (default): depths K = {0} ∪ {s, 2s, ... < m} ∪ {m}; prefix(k) is the ORIGINAL reasoning
  up to the end of step k (character spans); the answer is the FIRST one in the continuation only.
- `preprint`: the released code's choices (ippolito-cmu/legible_cot_preprint,
  `src/scripts/pedagogical_utility.py`): depths `range(0, m, 3)` plus m-1, never the full trace;
  prefixes re-joined with newlines; the answer read from prefix + continuation with the last-number
  fallback; repetition penalty 1.1 (applied by the embedded, vllm and openai backends) and
  redundancy threshold 0.85.
  docs/transfer.md sets them side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from legival_core.backends.base import ChatMessage
from legival_core.transfer.depths import preprint_depths, rollout_depths
from legival_core.transfer.utility import bin_of
from legival_core.types import Steps, canonical_json, content_hash

Profile = Literal["spec", "preprint"]

PROMPT_VERSION = "a1-v1"
"""Bump when the dataset prompts or the message layout change: it is part of the student key."""


@dataclass(frozen=True, slots=True)
class StudentConfig:
    """A student: a model plus everything that changes its outputs (never timeouts/concurrency).

    Built from the spec (`legival_core.spec.Student.config`, or `spec.student_config(**overrides)`),
    which holds every default; this record has none of its own."""

    name: str
    backend: str
    model: str
    dtype: str
    max_new_tokens: int
    forcing_max_tokens: int
    step_interval: int
    n_bins: int
    profile: Profile
    backend_options: dict[str, Any] = field(default_factory=dict)

    @property
    def repetition_penalty(self) -> float:
        return 1.1 if self.profile == "preprint" else 1.0

    def decoding(self) -> dict[str, object]:
        return {
            "greedy": True,
            "dtype": self.dtype,
            "max_new_tokens": self.max_new_tokens,
            "forcing_max_tokens": self.forcing_max_tokens,
            "repetition_penalty": self.repetition_penalty,
        }

    @property
    def student_key(self) -> str:
        """Hashes model, decoding, prompt version and profile: not the backend (the same model on
        vLLM or the embedded backend reuses results), not the name, not timeouts."""
        return content_hash(self.model, canonical_json(self.decoding()), PROMPT_VERSION, self.profile)


@dataclass(frozen=True, slots=True)
class PlannedRollout:
    trace_id: str
    k: int
    m: int
    bin: int
    prefix: str


def depths_for(m: int, config: StudentConfig) -> tuple[int, ...]:
    if config.profile == "preprint":
        return preprint_depths(m, config.step_interval)
    return rollout_depths(m, config.step_interval)


def prefix_for(steps: Steps, k: int, profile: Profile) -> str:
    if profile == "preprint":
        return "\n".join(steps.sentences()[:k])
    return steps.prefix(k)


def plan_trace(trace_id: str, steps: Steps, config: StudentConfig) -> list[PlannedRollout]:
    """The rollouts of one transfer trace in ascending depth (the order that keeps a prefix cache
    warm). A trace with no steps takes no part in transfer utility: it gets no plan."""
    if steps.m < 1:
        return []
    return [
        PlannedRollout(trace_id, k, steps.m, bin_of(k, steps.m, config.n_bins), prefix_for(steps, k, config.profile))
        for k in depths_for(steps.m, config)
    ]


def student_messages(system_prompt: str, question: str, prefix: str) -> list[ChatMessage]:
    """[system: dataset prompt, user: question, assistant: prefix(k)], rendered by the backend with
    `continue_final_message=True` so the student continues the teacher's words."""
    return [
        ChatMessage("system", system_prompt),
        ChatMessage("user", question),
        ChatMessage("assistant", prefix),
    ]
