"""The domain objects of Legi-Val (SPEC section 1), as frozen, slotted dataclasses.

pydantic is used only at the boundaries (import files, config); inside the library every object is
one of these immutable records, so that a metric is a pure function of its inputs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

GradeStatus = Literal["ok", "unparsed", "timeout", "truncated"]


def content_hash(*parts: str) -> str:
    """A stable content hash: sha256 over the parts, length-prefixed so that no two splits collide."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8")
        h.update(str(len(b)).encode("ascii"))
        h.update(b":")
        h.update(b)
    return h.hexdigest()[:32]


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and no spaces: the form hashed into cache keys and stored as params."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Problem:
    """One benchmark item. `choices` is the stored (already shuffled) option list for MC datasets."""

    dataset: str
    problem_id: str
    question: str
    gold: str
    choices: tuple[str, ...] = ()
    meta: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Grade:
    """The result of grading one answer against gold.

    `status` is "unparsed" when no answer could be extracted (graded incorrect, never dropped) and
    "timeout" when the equivalence check ran out of time (also graded incorrect, and counted), and
    "truncated" when the generation was cut off by its token budget (never graded as if complete).
    """

    correct: bool
    extracted: str | None
    status: GradeStatus = "ok"
    groups_correct: int | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """One teacher's attempt at one problem (SPEC section 1)."""

    teacher: str
    dataset: str
    problem_id: str
    reasoning: str
    answer_text: str
    truncated: bool = False
    provenance: str = "{}"
    trace_id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "trace_id",
            trace_id_of(self.teacher, self.dataset, self.problem_id, self.reasoning, self.answer_text),
        )


def trace_id_of(teacher: str, dataset: str, problem_id: str, reasoning: str, answer_text: str) -> str:
    """SPEC section 1: content hash of (teacher, dataset, problem_id, reasoning, answer_text)."""
    return content_hash(teacher, dataset, problem_id, reasoning, answer_text)


class Span(NamedTuple):
    """A step's character range [start, end) in the original text. A named tuple, not a frozen
    dataclass: a paper-scale resume builds millions of them (2-3x faster to build)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Steps:
    """The sentences of a reasoning text as character spans into the ORIGINAL text (SPEC section 1).

    `prefix(k)` slices the original text up to the end of step k, so whitespace and newlines inside
    the prefix are exactly what the teacher wrote (never a re-join of sentences).
    """

    text: str
    spans: tuple[Span, ...]

    @property
    def m(self) -> int:
        return len(self.spans)

    def step(self, i: int) -> str:
        """Step i, 1-based as in the paper."""
        s = self.spans[i - 1]
        return self.text[s.start : s.end]

    def sentences(self) -> list[str]:
        return [self.text[s.start : s.end] for s in self.spans]

    def prefix(self, k: int) -> str:
        if k < 0 or k > self.m:
            raise ValueError(f"prefix depth k={k} outside 0..{self.m}")
        if k == 0:
            return ""
        return self.text[: self.spans[k - 1].end]
