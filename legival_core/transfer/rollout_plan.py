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
from functools import lru_cache
from typing import Any, Literal

from legival_core.backends.base import ChatMessage
from legival_core.transfer.depths import preprint_depths, rollout_depths
from legival_core.transfer.utility import bin_of
from legival_core.types import Steps, canonical_json, content_hash

Profile = Literal["spec", "preprint"]
Mode = Literal["continue", "early_answer"]
"""`continue`: the student continues the prefix, then is forced if it gave no answer (SPEC section 4).
`early_answer` (Lanham et al. 2023, docs/transfer.md "Early answering"): the answer is forced at once
after the prefix, no continuation; its rows go to `early_answers`, never to `rollouts`."""

PROMPT_VERSION = "a1-v1"
"""Bump when the dataset prompts or the message layout change: it is part of the student key."""


@dataclass(frozen=True, slots=True)
class StudentConfig:
    """A student: a model plus everything that changes its outputs (never timeouts/concurrency).

    Built from the spec (`legival_core.run_config.Student.config`, or `spec.student_config(**overrides)`),
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
    mode: Mode = "continue"

    @property
    def repetition_penalty(self) -> float:
        return 1.1 if self.profile == "preprint" else 1.0

    def decoding(self) -> dict[str, object]:
        out: dict[str, object] = {
            "greedy": True,
            "dtype": self.dtype,
            "max_new_tokens": self.max_new_tokens,
            "forcing_max_tokens": self.forcing_max_tokens,
            "repetition_penalty": self.repetition_penalty,
        }
        if self.mode != "continue":  # only then: every stored student key of the continue mode stays as it was
            out["mode"] = self.mode
        return out

    @property
    def rollout_table(self) -> str:
        """Where this student's rows go: early answers apart, so they never enter a transfer metric."""
        return "early_answers" if self.mode == "early_answer" else "rollouts"

    @property
    def student_key(self) -> str:
        """Hashes model, decoding, prompt version and profile: not the backend (the same model on
        vLLM or the embedded backend reuses results), not the name, not timeouts."""
        return content_hash(self.model, canonical_json(self.decoding()), PROMPT_VERSION, self.profile)


@dataclass(slots=True)
class PlannedRollout:
    """One rollout of a plan. Its prefix is cut from the trace's steps when asked for: a resumed plan
    lists every depth of every trace and keeps only the missing ones, so building every prefix up
    front would copy the traces' text once per depth (gigabytes at paper scale) to throw it away.
    Not frozen for the same reason: a plan builds one per rollout (millions), and a frozen
    dataclass takes about three times as long to build. Treat it as read-only."""

    trace_id: str
    k: int
    m: int
    bin: int
    steps: Steps = field(repr=False, compare=False)
    profile: Profile = "spec"

    @property
    def prefix(self) -> str:
        """The teacher's text the student continues (`prefix_for` this depth and profile)."""
        return prefix_for(self.steps, self.k, self.profile)


def depths_for(m: int, config: StudentConfig) -> tuple[int, ...]:
    return _depths(m, config.step_interval, config.profile)


def _depths(m: int, step_interval: int, profile: Profile) -> tuple[int, ...]:
    if profile == "preprint":
        return preprint_depths(m, step_interval)
    return rollout_depths(m, step_interval)


def prefix_for(steps: Steps, k: int, profile: Profile) -> str:
    if profile == "preprint":
        return "\n".join(steps.sentences()[:k])
    return steps.prefix(k)


@lru_cache(maxsize=4096)
def _depth_bins(m: int, step_interval: int, n_bins: int, profile: Profile) -> tuple[tuple[int, int], ...]:
    """(k, bin) of every depth of a trace of m steps: the same for every trace of that length."""
    return tuple((k, bin_of(k, m, n_bins)) for k in _depths(m, step_interval, profile))


def depth_bins(m: int, config: StudentConfig) -> tuple[tuple[int, int], ...]:
    """(k, bin) of every depth a trace of m >= 1 steps is rolled out at (what `plan_trace` plans)."""
    return _depth_bins(m, config.step_interval, config.n_bins, config.profile) if m >= 1 else ()


def plan_trace(trace_id: str, steps: Steps, config: StudentConfig,
               stored: frozenset[int] = frozenset()) -> list[PlannedRollout]:
    """The rollouts of one transfer trace in ascending depth (the order that keeps a prefix cache
    warm), less the depths in `stored` (a resume: only the missing ones are built, not ~36 per trace
    to keep one). A trace with no steps takes no part in transfer utility: it gets no plan."""
    m = steps.m
    if m < 1:
        return []
    profile = config.profile
    return [PlannedRollout(trace_id, k, m, b, steps, profile)
            for k, b in _depth_bins(m, config.step_interval, config.n_bins, profile) if k not in stored]


def student_messages(system_prompt: str, question: str, prefix: str) -> list[ChatMessage]:
    """[system: dataset prompt, user: question, assistant: prefix(k)], rendered by the backend with
    `continue_final_message=True` so the student continues the teacher's words."""
    return [
        ChatMessage("system", system_prompt),
        ChatMessage("user", question),
        ChatMessage("assistant", prefix),
    ]
