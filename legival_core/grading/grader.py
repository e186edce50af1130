"""A grader built from a finder (where answers are) and a judge (is this answer right).

Splitting the two lets `first_answer_complete` ask the SAME extraction the grader uses, without
running the (possibly slow) equivalence check, so early stopping and grading can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from legival_core.grading.extract import Finder, Role, pick
from legival_core.types import Grade, Problem

Judge = Callable[[str, Problem], Grade]
"""judge(extracted_value, problem) -> Grade (status "ok" or "timeout")."""


@dataclass(frozen=True, slots=True)
class AnswerGrader:
    """Callable as `grade(answer_text, reasoning, problem, role) -> Grade` (the registry's Grader)."""

    finder: Finder
    judge: Judge

    def extract(self, answer_text: str, reasoning: str, role: Role) -> str | None:
        found = pick(self.finder, answer_text, reasoning, role)
        return found.value if found else None

    def __call__(self, answer_text: str, reasoning: str, problem: Problem, role: Role) -> Grade:
        value = self.extract(answer_text, reasoning, role)
        if value is None:
            return Grade(correct=False, extracted=None, status="unparsed")
        return self.judge(value, problem)
