"""A grader built from a finder (where answers are) and a judge (is this answer right).

Splitting the two lets `first_answer_complete` ask the SAME extraction the grader uses, without
running the (possibly slow) equivalence check, so early stopping and grading can never disagree.

`grade_pred` grades a user's prediction that may be a full response or the bare answer itself
(`legival grade --pred-format`): an answer is read the way the finder reads the content of a
`\\boxed{}` (GSM8K: the number it states; multiple choice: its letter), so `18`, `$18` and
`\\boxed{18}` grade alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from legival_core.grading.extract import Finder, Role, pick, select
from legival_core.types import Grade, Problem

Judge = Callable[[str, Problem], Grade]
"""judge(extracted_value, problem) -> Grade (status "ok" or "timeout")."""

PredFormat = Literal["answer", "response", "auto"]
PRED_FORMATS: tuple[str, ...] = get_args(PredFormat)
DEFAULT_PRED_FORMAT: PredFormat = "auto"
MAX_EXPRESSION_CHARS = 200
MAX_EXPRESSION_WORDS = 3
PRED_FORMAT_RULE = (
    "answer: `pred` is the answer itself (read like the content of a \\boxed{}); response: `pred` is a "
    "full model response, searched for its answer; auto (default): a `pred` with no answer marker "
    "(no \\boxed{}, no '####', no 'the answer is ...' / 'Answer:' phrase) that is a single expression "
    f"(one line of at most {MAX_EXPRESSION_CHARS} characters and at most {MAX_EXPRESSION_WORDS} words of "
    "plain text outside LaTeX commands, that is one token or holds a digit or a math symbol) is graded as "
    "the answer, any other `pred` as a response"
)
_MATH_SYMBOLS = re.compile(r"[\\^_{}=+*/<>()\[\]|$]")


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

    def has_marker(self, text: str) -> bool:
        """Whether the text marks an answer explicitly (a structured or phrased answer, tiers 1-2)."""
        return any(c.tier <= 2 for c in self.finder(text, False))

    def answer_value(self, answer: str) -> str | None:
        """The value of a bare answer: what the finder reads from `\\boxed{answer}` (the box that holds
        all of it), else the finder's own pick in the answer text (e.g. a JSON grouping)."""
        text = answer.strip()
        boxed = "\\boxed{" + text + "}"
        whole = [c for c in self.finder(boxed, False) if c.start == 0 and c.end >= len(boxed) and c.tier == 1]
        if whole:
            return whole[0].value
        found = select(self.finder(text, False), "teacher")
        return found.value if found else None

    def grade_answer(self, answer: str, problem: Problem) -> Grade:
        value = self.answer_value(answer)
        if value is None:
            return Grade(correct=False, extracted=None, status="unparsed")
        return self.judge(value, problem)


def is_single_expression(text: str) -> bool:
    """One line of at most MAX_EXPRESSION_CHARS characters with at most MAX_EXPRESSION_WORDS words of
    plain text (two letters or more) outside LaTeX commands, which is one token or holds a digit or a
    math symbol: `18`, `\\frac{1}{2}`, `(C)`, `C`, `18 dollars`, `\\text{Monday}`; not
    `So the total comes to 18.` (prose) nor `no answer here` (words only)."""
    t = text.strip()
    if not t or "\n" in t or len(t) > MAX_EXPRESSION_CHARS:
        return False
    words = re.findall(r"[A-Za-z]{2,}", re.sub(r"\\[A-Za-z]+", " ", t))
    if len(words) > MAX_EXPRESSION_WORDS:
        return False
    return len(t.split()) == 1 or any(ch.isdigit() for ch in t) or _MATH_SYMBOLS.search(t) is not None


def grade_pred(grader: Callable[[str, str, Problem, Role], Grade], pred: str, problem: Problem, role: Role,
               pred_format: PredFormat = DEFAULT_PRED_FORMAT) -> tuple[Grade, Literal["answer", "response"]]:
    """Grade `pred` read as an answer or as a response (see PRED_FORMAT_RULE); returns the grade and
    how `pred` was read. A grader that is not an `AnswerGrader` reads an answer as `\\boxed{pred}`."""
    if pred_format == "response":
        return grader(pred, "", problem, role), "response"
    if pred_format == "auto":
        marked = grader.has_marker(pred) if isinstance(grader, AnswerGrader) else "\\boxed" in pred
        if marked or not is_single_expression(pred):
            return grader(pred, "", problem, role), "response"
    if isinstance(grader, AnswerGrader):
        return grader.grade_answer(pred, problem), "answer"
    return grader("\\boxed{" + pred.strip() + "}", "", problem, "teacher"), "answer"
