"""MATH (Hendrycks et al. 2021), including the MATH-500 subset: free-form LaTeX answers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from legival_core.datasets.base import DatasetSpec, register_dataset
from legival_core.grading import AnswerGrader, Candidate, boxed_spans, last_boxed, math_equivalent
from legival_core.grading.extract import phrase_answers
from legival_core.grading.records import field, read_jsonl
from legival_core.types import Grade, Problem

GRADER_VERSION = "math-1"

# Legi-Val paper, appendix A.1 (ippolito-cmu/legible_cot_preprint, src/utils/prompts.py), verbatim;
# `\x20` keeps the original's trailing spaces without trailing whitespace in this file.
SYSTEM_PROMPT = """You are an expert on answering and explaining math questions. Read the question and formulate a response. Please reason step by step.
Formatting instructions:
1. When you have a final answer, you will wrap the final answer around a \\boxed{} function so that it can be evaluated. If no such answer is found, you will receive no credit regardless of how much reasoning you did.\x20
2. Your answer should exclusively use standard LaTeX math formatting (e.g., \\frac{a}{b} for fractions, \\sqrt{x} for square roots, \\infty for infinity etc.). Do not use any math symbols or characters other than LaTeX formats -- they are ugly and indecipherable.
3. Do not include any decorators like dollar signs ($) in your final answer.
4. Do not surround the answer in a LaTeX code block. Return it as-is.
5. Do not include any units, suffixes, or variable definitions unless they are absolutely necessary.
6. Do not include any pre-phrasing like "the answer is..." or "x=...". Your goal is to create the easiest-to-parse string for a latex2sympy evaluator.
7. Your response MUST be ONLY the LaTeX-formatted final answer, with no additional text, explanations, or JSON structure.

Do not terminate until you have come up with a final answer.
"""


def _is_prose(value: str) -> bool:
    """ "probably going to be 5" is a hedge, not an answer: more than four plain English words."""
    words = re.findall(r"(?<!\\)\b[A-Za-z]{2,}\b", re.sub(r"\\[A-Za-z]+|\\text\{[^{}]*\}", " ", value))
    return len(words) > 4


def find_math(text: str, closed: bool) -> list[Candidate]:
    """Balanced `\\boxed{}` (tier 1) and "the answer is ..." phrases (tier 2) that are not prose."""
    boxes = [c for c in boxed_spans(text) if c.value]
    phrases = [c for c in phrase_answers(text, closed) if not _is_prose(c.value)]
    return boxes + phrases


def judge(value: str, problem: Problem) -> Grade:
    outcome = math_equivalent(value, problem.gold)
    if outcome == "timeout":
        return Grade(correct=False, extracted=value, status="timeout")
    return Grade(correct=outcome == "equal", extracted=value)


def load_math(path: Path) -> Iterator[Problem]:
    """`problem`/`answer` JSONL (MATH-500 or the 5,000-problem test file).

    problem_id = `unique_id` when present (MATH-500: `test/precalculus/807.json`, the ids of the shared
    trace files), else `math-test-<id>` (`id` field, else the 0-based row). A row without `answer`
    but with a Hendrycks `solution` takes the last boxed answer of the solution.
    """
    path = Path(path)
    for i, rec in read_jsonl(path):
        question = field(rec, "problem", path)
        if rec.get("answer") is None and isinstance(rec.get("solution"), str):
            gold = last_boxed(rec["solution"])
            if gold is None:
                raise ValueError(
                    f"{path}:{rec['__line__']}: missing field 'answer' (no \\boxed{{}} in solution)"
                )
        else:
            gold = field(rec, "answer", path)
        pid = rec.get("unique_id") or f"math-test-{rec.get('id', i)}"
        meta = tuple(
            (k, str(rec[k])) for k in ("subject", "level", "math500_unique_id") if rec.get(k) is not None
        )
        yield Problem(dataset="math", problem_id=str(pid), question=question, gold=gold, meta=meta)


SPEC = register_dataset(
    DatasetSpec(
        name="math",
        grader=AnswerGrader(find_math, judge),
        loaders={"jsonl": load_math},
        aliases=("math500", "math-500"),
        system_prompt=SYSTEM_PROMPT,
        forcing_text="The answer is \\boxed{",
        grader_version=GRADER_VERSION,
    )
)
