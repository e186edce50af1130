"""The options of `legival study create` and their defaults (the one place they live: the CLI reads them
with `default_of`), checked as the spec's sections are, so a bad value is one `error:` line naming it."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from legival_core.run_config.base import Strict

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A study's name: it names the key file (`<db>.studies/<name>.key`), so no path separator."""


class StudySettings(Strict):
    """What a study design is made from (docs/study.md "Design")."""

    name: str
    teachers: tuple[str, ...] = ()
    """Empty: every teacher with transfer traces in the store."""
    problems: int = Field(ge=1, description="problems per teacher: each is shown at every depth")
    depths: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    per_participant: int = Field(default=12, ge=1, description="items per participant (attention checks apart)")
    participants: int = Field(default=20, ge=1, le=9999)
    attention: int = Field(default=2, ge=0, description="attention-check items per participant")
    seed: int = 0
    minutes_per_item: float = Field(default=1.5, gt=0, description="for the participant-minutes estimate")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a study name: letters, digits, '.', '_' and '-', at most 64, "
                             "starting with a letter or digit")
        return v

    @field_validator("depths")
    @classmethod
    def _depths(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            raise ValueError("give at least one prefix fraction, e.g. 0.25,0.5,0.75,1.0")
        bad = [f for f in v if not 0 < f <= 1]
        if bad:
            raise ValueError(f"{bad[0]} is outside (0, 1]: a depth is the fraction k/m of the trace shown")
        if len(set(v)) != len(v):
            raise ValueError("a fraction is given twice")
        return tuple(sorted(v))


class StudyAnalysis(Strict):
    """How the report analyses the studies' answers (docs/study.md "Analysis"); the intervals' resamples
    and seed are the report's (`report.resamples`, `report.seed`)."""

    max_attention_failures: int = Field(
        default=0, ge=0, description="attention checks a participant may answer wrong and still count; one more "
                                     "excludes them from the analysis (counted in human_study.csv)")

