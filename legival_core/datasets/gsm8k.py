"""GSM8K (Cobbe et al. 2021): grade-school word problems with an integer answer after `####`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from legival_core.datasets.base import DatasetSpec, register_dataset
from legival_core.grading import AnswerGrader, Candidate, bare_numbers, boxed_spans, hash_answers
from legival_core.grading.extract import phrase_answers
from legival_core.grading.numeric import number_in, numbers_equal
from legival_core.grading.records import field, read_jsonl
from legival_core.types import Grade, Problem

GRADER_VERSION = "gsm8k-1"

SYSTEM_PROMPT = """You are an expert on answering and explaining grade-school math word problems. Read the question and formulate a response. Please reason step by step.
Formatting instructions:
1. When you have a final answer, you will wrap the final answer around a \\boxed{} function so that it can be evaluated. If no such answer is found, you will receive no credit regardless of how much reasoning you did.
2. The final answer is a single number. Write it with digits only: no units, no currency signs, no percent signs and no thousands separators.
3. Do not include any pre-phrasing like "the answer is..." inside the \\boxed{}.

Do not terminate until you have come up with a final answer.
"""


def gold_from_solution(answer: str) -> str | None:
    """The number after the last `####` of a GSM8K solution, commas removed."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "").rstrip(".") or None


def find_numbers(text: str, closed: bool) -> list[Candidate]:
    """Boxes, `####`, phrases (each reduced to the number it states) and bare numbers (tier 3)."""
    out = []
    for c in boxed_spans(text) + phrase_answers(text, closed):
        n = number_in(c.value)
        if n is not None:
            out.append(Candidate(c.start, c.end, n, c.tier))
    return out + hash_answers(text, closed) + bare_numbers(text, closed)


def judge(value: str, problem: Problem) -> Grade:
    return Grade(correct=numbers_equal(value, problem.gold), extracted=value)


def load_gsm8k(path: Path, split: str | None = None) -> Iterator[Problem]:
    """`question`/`answer` JSONL; problem_id `gsm8k-<split>-<0-based row>`, split defaulting to the
    file stem (`test.jsonl` -> `gsm8k-test-0`, the ids the shared trace files use)."""
    path = Path(path)
    split = split or path.stem
    for i, rec in read_jsonl(path):
        question = field(rec, "question", path)
        gold = gold_from_solution(field(rec, "answer", path))
        if gold is None:
            raise ValueError(f"{path}:{rec['__line__']}: field 'answer' has no '#### <number>'")
        yield Problem(dataset="gsm8k", problem_id=f"gsm8k-{split}-{i}", question=question, gold=gold)


SPEC = register_dataset(
    DatasetSpec(
        name="gsm8k",
        grader=AnswerGrader(find_numbers, judge),
        loaders={"jsonl": load_gsm8k},
        system_prompt=SYSTEM_PROMPT,
        forcing_text="The answer is \\boxed{",
        grader_version=GRADER_VERSION,
    )
)
