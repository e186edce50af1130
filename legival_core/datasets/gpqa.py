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

from legival_core.datasets.base import DatasetSpec, JudgeRubric, register_dataset
from legival_core.datasets.wrong_answers import letter_wrong_answer
from legival_core.grading import AnswerGrader, letter_answers
from legival_core.readers.input_files import InputFileError, supported, text_lines
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

    problem_id = `gpqa-<Record ID>` when that column is present, else `gpqa-<0-based row>`. The file
    may be gzip- or zstd-compressed (`input_files`, told by its first bytes).
    """
    path = Path(path)
    reader = csv.DictReader(_csv_lines(path))
    try:
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
    except csv.Error as e:
        raise ValueError(f"{path}:{reader.line_num}: not a readable CSV row ({e})") from None


def _csv_lines(path: Path) -> Iterator[str]:
    """The CSV file's text lines, each with its newline (a quoted cell spans lines), decompressed if
    need be; another container (a zip, Parquet...) is refused saying what it is and that CSV is read."""
    try:
        yield from text_lines(path)
    except InputFileError as e:
        raise InputFileError(e.file, e.message.replace(
            supported(False), "the gpqa loader reads CSV, plain or compressed with gzip or zstd")) from None


def judge(value: str, problem: Problem) -> Grade:
    return Grade(correct=value == problem.gold.strip().upper(), extracted=value)


# The backtracking judge's rubric for this dataset (SPEC section 3); provenance in
# legival_core/judges/prompt.py. Changing it changes judgements: bump judges.prompt.PROMPT_VERSION.
JUDGE_RUBRIC = JudgeRubric(
    task="""You are an expert in analyzing complex scientific and technical reasoning traces generated by large language models on the GPQA (Graduate-Level Google-Proof Q&A) dataset. Your task is to identify instances of 'backtracking' within these traces.

A reasoning trace in GPQA involves high-level physics, biology, chemistry, or mathematics. Backtracking occurs when the model revises a technical assumption, abandons a specific formulaic approach, or realizes a conceptual error in its domain-specific logic.

Your goal is to determine if the provided reasoning trace exhibits backtracking. Look for indicators such as:
- Explicit keywords or phrases (e.g., 'Wait, that's not right', 'Actually', 'Re-evaluating', 'On second thought', 'If we instead assume').
- Correcting a domain-specific constant or formula (e.g., realizing a sign error in a Lagrangian or a wrong reagent in a chemical reaction).
- Realizing a specific constraint of the GPQA question was overlooked (e.g., 'The question asks for the inverse, not the direct value').
- Switching between different theoretical frameworks when the first leads to a contradiction.

Do not confuse simple step-by-step derivation or adding more detail with backtracking. Backtracking must involve a "pivot" where a previous thought is discarded or corrected.""",
    final_answer="The final choice (A, B, C, or D) or text answer extracted from the trace.",
    reason="Explain the technical shift or correction made here.",
    rules="""**Filtering Rules:**
- `backtracking_detected`: `true` if the model pivots or corrects a technical path; `false` if it proceeds linearly.
- `backtracking_steps`: List step numbers where the pivot occurs.
- `confidence`: 1.0 for certain, 0.5 for uncertain.""",
)


SPEC = register_dataset(
    DatasetSpec(
        wrong_answer=letter_wrong_answer,
        judge_rubric=JUDGE_RUBRIC,
        name="gpqa",
        task_patterns=("gpqa*", "*/gpqa*", "leaderboard_gpqa*"),
        grader=AnswerGrader(partial(letter_answers, letters=LETTERS), judge),
        loaders={"csv": load_gpqa_csv},
        aliases=("gpqa-diamond", "gpqa_diamond"),
        system_prompt=SYSTEM_PROMPT,
        forcing_text="The correct answer is \\boxed{",
        grader_version=GRADER_VERSION,
    )
)
