"""The reward spec: Legi-Val's metrics as a training reward (`legival reward check|serve|report`,
docs/reward.md). Every default lives here; `legival_core/rl/` scores with it.

A reward is a weighted sum of per-completion components, each in [0, 1] with higher better (the
paper's directions: correct, more transferable, shorter, less redundant, less backtracking, in the
dataset's answer format). The watch student is never part of the reward: it reads the same prefixes so
that a policy which learns to please the reward's student shows up as a widening gap (docs/reward.md
"The Goodhart watch").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from legival_core.catalog import GEMMA3_270M
from legival_core.run_config.base import (
    SpecError,
    Strict,
    check_name,
    format_errors,
    read_yaml,
    registered_name,
    resolve_path,
)
from legival_core.run_config.sections import Efficiency, Transfer
from legival_core.run_config.students import Student
from legival_core.transfer.rollout_plan import StudentConfig

COMPONENTS = ("correct", "transfer", "length", "redundancy", "backtracking", "format")
"""Every component a reward may weigh, in the order they are reported."""


class Component(Strict):
    weight: float = Field(default=1.0, ge=0, description="its weight in the reward's sum")


class Correct(Component):
    """1 when the completion's answer equals the gold (the dataset's grader: the LAST answer, SPEC §2)."""


class TransferComponent(Component):
    """The completion's transfer utility for `student` (SPEC §4: FOTU over the depths
    {0, s, 2s, ... < m} ∪ {m} of its reasoning's m steps). SPEC computes it for correct traces only:
    an incorrect completion gets `incorrect` (a documented constant, never an exception)."""

    student: Student = Student()
    step_interval: int = Field(default=8, ge=1, description="s of the depth grid (a large s: 2-3 depths)")
    max_new_tokens: int = Field(default=256, ge=1, description="the continuation cap of each rollout")
    n_bins: int = Field(default_factory=lambda: Transfer().n_bins, ge=2)
    incorrect: float = Field(default=0.0, ge=0, le=1, description="the value for an incorrect completion")

    def student_config(self, student: Student | None = None) -> StudentConfig:
        """The library's student config of `student` (default: this component's) on this grid."""
        transfer = Transfer(step_interval=self.step_interval, max_new_tokens=self.max_new_tokens, n_bins=self.n_bins)
        return (student or self.student).config(transfer)


class Length(Component):
    """min(1, target / L): 1 at or under the target, falling as the reasoning grows (SPEC §3's
    direction: shorter is better). L = its cl100k tokens (`tokens`) or its steps (`steps`); L = 0: 1."""

    unit: Literal["tokens", "steps"] = "tokens"
    target: int = Field(default=300, ge=1)


class Redundancy(Component):
    """1 - redundancy (SPEC §3: the share of steps i >= 2 with r_i > tau, all-MiniLM-L6-v2)."""

    tau: float = Field(default_factory=lambda: Efficiency().tau, ge=0, le=1)


class Backtracking(Component):
    """1 - the share of steps flagged as backtracking by the lexical cues (SPEC §3's fallback method;
    an LLM judge per completion is not offered inside a training loop)."""

    method: Literal["lexical"] = "lexical"


class Format(Component):
    """1 when the completion states an explicit answer the dataset's student extractor reads (a
    `\\boxed{}`, `#### N`, "the answer is ..."), never a bare number (SPEC §2)."""


class Components(Strict):
    correct: Correct | None = Correct()
    transfer: TransferComponent | None = None
    length: Length | None = None
    redundancy: Redundancy | None = None
    backtracking: Backtracking | None = None
    format: Format | None = None

    def weighed(self) -> dict[str, Component]:
        """The components that are on (given), by name, in `COMPONENTS` order."""
        return {n: c for n in COMPONENTS if (c := getattr(self, n)) is not None}


class Combine(Strict):
    """reward = sum over the components of weight x value; `gate_on_correct`: an incorrect completion's
    reward is 0 whatever else it earns (no reward for a legible wrong answer)."""

    gate_on_correct: bool = False


class Watch(Strict):
    """A held-out student that reads the same prefixes as the transfer component's student, logged
    beside every reward and never part of it (docs/reward.md "The Goodhart watch")."""

    student: Student = Student(name="gemma-3-270m", model=GEMMA3_270M)


class RewardSpec(Strict):
    name: str = "legibility"
    dataset: str = "gsm8k"
    components: Components = Components()
    combine: Combine = Combine()
    watch: Watch | None = None
    store: Path | None = Field(default=None, description="the store whose journal logs every scored item "
                                                         "(none: nothing is logged)")
    max_completion_chars: int = Field(default=200_000, ge=1, description="a longer completion is refused alone")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "reward name")

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        return registered_name("dataset", v)

    @field_validator("store")
    @classmethod
    def _store(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return None if v is None else resolve_path(v, info)

    @model_validator(mode="after")
    def _checks(self) -> RewardSpec:
        if not self.components.weighed():
            raise ValueError("components: at least one component (correct, transfer, length, redundancy, "
                             "backtracking, format)")
        if self.watch is not None and self.components.transfer is None:
            raise ValueError("watch: the watch student reads the transfer component's prefixes: add "
                             "components.transfer")
        t = self.components.transfer
        if self.watch is not None and t is not None and self.watch.student.name == t.student.name:
            raise ValueError(f"watch.student: {t.student.name!r} is the transfer component's student; the watch "
                             "must be another student (it is held out from the reward)")
        return self

    def spec_hash(self) -> str:
        """What changes the numbers (the whole spec but where it logs): part of every log row."""
        from legival_core.types import canonical_json, content_hash

        return content_hash(canonical_json(self.model_dump(mode="json", exclude={"store"})))


def parse_reward_spec(data: Any, base_dir: str | Path | None = None, source: str = "reward spec") -> RewardSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the top level must be a mapping of keys (dataset, components, ...)")
    try:
        return RewardSpec.model_validate(data, context={"base_dir": str(base_dir) if base_dir else None,
                                                        "check_files": True})
    except ValidationError as e:
        raise SpecError(format_errors(e, source)) from None


def load_reward_spec(path: str | Path) -> RewardSpec:
    """Read and validate a reward spec (SpecError naming the file, the key and what to fix)."""
    path = Path(path)
    return parse_reward_spec(read_yaml(path, "reward spec"), path.resolve().parent, str(path))
