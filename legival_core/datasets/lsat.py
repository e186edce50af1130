"""LSAT (AGIEval's lsat-ar / lsat-lr / lsat-rc): five-option reasoning questions, graded by letter.

Unlike GPQA, the options are NOT shuffled: the public AGIEval files already give them lettered, in
the order of the original exam, and the gold label refers to those letters; keeping them makes our
problems identical to everyone else's. `Problem.choices` still stores them (letter prefix removed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from legival_core.datasets.base import DatasetSpec, register_dataset
from legival_core.grading import AnswerGrader, letter_answers
from legival_core.grading.records import field, read_jsonl
from legival_core.types import Grade, Problem

GRADER_VERSION = "lsat-1"
LETTERS = "ABCDE"

SYSTEM_PROMPT = """You are an expert on answering and explaining law school admission test (LSAT) questions: analytical reasoning, logical reasoning and reading comprehension. To achieve success on this task, you will carefully read the passage and the question and reason step by step.

You will choose a single option from a set of possible choices. Exactly one of the options is correct -- the rest are false. What is the single, most likely answer choice among the options?

When you are ready to respond, format your final answer as follows: "The correct answer is \\boxed{X}", where X is whichever letter corresponds to your choice.
The response inside of \\boxed{} MUST be ONLY the corresponding letter, with no additional text, explanations, or JSON structure. If you do not put your answer in \\boxed{}, your answer will not be evaluated and you will gain no reward.

Do not terminate until you have come up with a final answer.
"""

_OPTION_RE = re.compile(r"^\s*\(?([A-E])\)\s*")


def format_question(passage: str, question: str, choices: tuple[str, ...]) -> str:
    lines = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    head = f"{passage.strip()}\n\n" if passage.strip() else ""
    return (
        f"{head}What is the correct answer to this question: {question.strip()}\nChoices:\n{lines}\n\n"
        "Based on the above, what is the single, most likely answer choice? Reason step by step. "
        'Format your final answer as follows: "The correct answer is \\boxed{X}"'
    )


def load_agieval_jsonl(path: Path) -> Iterator[Problem]:
    """AGIEval JSONL (`passage`, `question`, `options` ["(A)...", ...], `label` "C").

    problem_id = `<file stem>-<0-based row>` (`lsat-lr-0`), prefixed with `lsat-` if the stem lacks it.
    """
    path = Path(path)
    stem = path.stem if path.stem.startswith("lsat") else f"lsat-{path.stem}"
    for i, rec in read_jsonl(path):
        line = rec["__line__"]
        question = field(rec, "question", path)
        options = field(rec, "options", path, list)
        label = field(rec, "label", path).strip().upper()
        choices = []
        for k, opt in enumerate(options):
            m = _OPTION_RE.match(str(opt))
            if not m or m.group(1) != LETTERS[k]:
                raise ValueError(f"{path}:{line}: field 'options' item {k} should start with ({LETTERS[k]})")
            choices.append(str(opt)[m.end() :].strip())
        if label not in LETTERS[: len(choices)]:
            raise ValueError(
                f"{path}:{line}: field 'label' {label!r} is not one of the {len(choices)} options"
            )
        passage = rec.get("passage") or ""
        yield Problem(
            dataset="lsat",
            problem_id=f"{stem}-{i}",
            question=format_question(str(passage), question, tuple(choices)),
            gold=label,
            choices=tuple(choices),
        )


def judge(value: str, problem: Problem) -> Grade:
    return Grade(correct=value == problem.gold.strip().upper(), extracted=value)


SPEC = register_dataset(
    DatasetSpec(
        name="lsat",
        grader=AnswerGrader(partial(letter_answers, letters=LETTERS), judge),
        loaders={"jsonl": load_agieval_jsonl},
        system_prompt=SYSTEM_PROMPT,
        forcing_text="The correct answer is \\boxed{",
        grader_version=GRADER_VERSION,
    )
)
