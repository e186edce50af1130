"""Answer extraction and grading (SPEC section 2), shared by every dataset module.

Datasets build an `AnswerGrader` (grader.py) from a finder (extract.py, groups.py) and a judge
(numeric.py for numbers, normalize.py and math_equiv.py for MATH answers); MATH equivalence runs
math-verify in a persistent, killable worker process (worker.py, started as `_worker_main`). Reading
the files that hold traces is `legival_core.readers`.
"""

from __future__ import annotations

from legival_core.grading.extract import (
    Candidate,
    Role,
    bare_numbers,
    boxed_spans,
    first_boxed,
    hash_answers,
    last_boxed,
    letter_answers,
    phrase_answers,
    pick,
    select,
)
from legival_core.grading.grader import (
    DEFAULT_PRED_FORMAT,
    PRED_FORMATS,
    AnswerGrader,
    Judge,
    PredFormat,
    grade_pred,
    is_single_expression,
)
from legival_core.grading.groups import canonical_groups, connections_answers, groups_correct, parse_groups
from legival_core.grading.math_equiv import math_equivalent, strings_equivalent
from legival_core.grading.normalize import strip_string
from legival_core.grading.numeric import numbers_equal, to_fraction
from legival_core.grading.worker import (
    MathVerifyWorker,
    VerifyStats,
    default_worker,
    reset_verify_stats,
    set_default_timeout,
    verify_stats,
)
from legival_core.types import Problem


def extract_answer(dataset: str, answer_text: str, reasoning: str = "", role: Role = "teacher") -> str | None:
    """The answer a dataset's grader would grade, without grading it (None when unparsed)."""
    from legival_core.registry import get

    grader = get("grader", dataset)
    if isinstance(grader, AnswerGrader):
        return grader.extract(answer_text, reasoning, role)
    grade = grader(answer_text, reasoning, Problem(dataset, "", "", ""), role)
    return None if grade.status == "unparsed" else grade.extracted


def first_answer_complete(dataset: str, continuation: str) -> bool:
    """True exactly when student-role extraction finds an answer in `continuation` (SPEC section 4).

    Student extraction only accepts answers that further text cannot change (a closed `\\boxed{}`, a
    number followed by a non-digit, a phrase ended by a newline or ". "), so once this is true,
    generation may stop without changing the graded result. A caller that knows generation ended
    (end-of-sequence) can append "\\n" to the continuation so that a trailing "The answer is 42"
    counts before the forcing pass is considered.
    """
    return extract_answer(dataset, continuation, "", "student") is not None


__all__ = [
    "DEFAULT_PRED_FORMAT",
    "PRED_FORMATS",
    "AnswerGrader",
    "Candidate",
    "Judge",
    "MathVerifyWorker",
    "Role",
    "VerifyStats",
    "bare_numbers",
    "boxed_spans",
    "canonical_groups",
    "connections_answers",
    "default_worker",
    "extract_answer",
    "first_answer_complete",
    "first_boxed",
    "grade_pred",
    "groups_correct",
    "hash_answers",
    "is_single_expression",
    "last_boxed",
    "letter_answers",
    "math_equivalent",
    "numbers_equal",
    "parse_groups",
    "phrase_answers",
    "PredFormat",
    "pick",
    "reset_verify_stats",
    "select",
    "set_default_timeout",
    "strings_equivalent",
    "strip_string",
    "to_fraction",
    "verify_stats",
]
