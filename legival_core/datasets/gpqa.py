"""GPQA (Rein et al. 2023): four-option graduate-level science questions, graded by letter.

The public CSV stores the correct answer in its own column, so the options must be shuffled; they
are shuffled ONCE per problem with a seed derived from problem_id (SPEC section 2) and the shuffled
order is stored in `Problem.choices`, so every teacher and student sees the same letters.
"""

from __future__ import annotations

import csv
import hashlib
import random
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from legival_core.datasets.base import DatasetSpec, register_dataset
from legival_core.grading import AnswerGrader, letter_answers
from legival_core.types import Grade, Problem

GRADER_VERSION = "gpqa-1"
LETTERS = "ABCD"

# Legi-Val paper, appendix A.1 (ippolito-cmu/legible_cot_preprint, src/utils/prompts.py), verbatim;
# `\x20` keeps the original's trailing spaces without trailing whitespace in this file.
SYSTEM_PROMPT = """You are an expert on answering and explaining graduate-level scientific reasoning questions. To achieve success on this task, you will carefully consider the question and reason step by step.

You will choose a single option from a set of possible choices. Exactly one of the options is correct -- the rest are false. What is the single, most likely answer choice among the options?\x20

When you are ready to respond, format your final answer as follows: "The correct answer is \\boxed{X}", where X is whichever letter corresponds to your choice.\x20
The response inside of \\boxed{} MUST be ONLY the corresponding letter, with no additional text, explanations, or JSON structure. If you do not put your answer in \\boxed{}, your answer will not be evaluated and you will gain no reward.

Do not terminate until you have come up with a final answer.
"""

_COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def shuffle_seed(problem_id: str) -> int:
    """sha256(problem_id) mod 2**32: stable across Python versions and processes (unlike hash())."""
    return int(hashlib.sha256(problem_id.encode("utf-8")).hexdigest(), 16) % 2**32


def shuffled_choices(problem_id: str, correct: str, incorrect: list[str]) -> tuple[tuple[str, ...], str]:
    """The four options in their per-problem order, and the letter of the correct one."""
    options = [correct, *incorrect]
    order = list(range(len(options)))
    random.Random(shuffle_seed(problem_id)).shuffle(order)
    choices = tuple(options[j] for j in order)
    return choices, LETTERS[order.index(0)]


def format_question(question: str, choices: tuple[str, ...]) -> str:
    """The paper's multiple-choice user prompt (`format_mcq` in the Legi-Val code)."""
    lines = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return (
        f"What is the correct answer to this question: {question}\nChoices:\n{lines}\n\n"
        "Based on the above, what is the single, most likely answer choice? Reason step by step. "
        'Format your final answer as follows: "The correct answer is \\boxed{X}"'
    )


def load_gpqa_csv(path: Path) -> Iterator[Problem]:
    """The public GPQA CSV (gpqa_main / gpqa_diamond / gpqa_extended).

    problem_id = `gpqa-<Record ID>` when that column is present, else `gpqa-<0-based row>`.
    """
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}:1: missing column(s) {', '.join(repr(c) for c in missing)}")
        for i, row in enumerate(reader):
            for c in _COLUMNS:
                if not (row.get(c) or "").strip():
                    raise ValueError(f"{path}:{reader.line_num}: row {i} has an empty field {c!r}")
            record_id = (row.get("Record ID") or "").strip()
            pid = f"gpqa-{record_id or i}"
            choices, gold = shuffled_choices(
                pid, row["Correct Answer"].strip(), [row[f"Incorrect Answer {k}"].strip() for k in (1, 2, 3)]
            )
            question = row["Question"].strip()
            yield Problem(
                dataset="gpqa",
                problem_id=pid,
                question=format_question(question, choices),
                gold=gold,
                choices=choices,
                meta=(("raw_question", question),),
            )


def judge(value: str, problem: Problem) -> Grade:
    return Grade(correct=value == problem.gold.strip().upper(), extracted=value)


SPEC = register_dataset(
    DatasetSpec(
        name="gpqa",
        grader=AnswerGrader(partial(letter_answers, letters=LETTERS), judge),
        loaders={"csv": load_gpqa_csv},
        aliases=("gpqa-diamond", "gpqa_diamond"),
        system_prompt=SYSTEM_PROMPT,
        forcing_text="The correct answer is \\boxed{",
        grader_version=GRADER_VERSION,
    )
)
