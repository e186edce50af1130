"""`legival grade`'s `pred`: a bare answer or a full response (`--pred-format`), and numbers in
scientific notation read whole by the GSM8K grader."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from legival_core.datasets import get_dataset
from legival_core.datasets.batch_grade import grade_jsonl
from legival_core.grading import (
    extract_answer,
    first_answer_complete,
    grade_pred,
    is_single_expression,
    to_fraction,
)
from legival_core.readers.records import jsonl_records, read_jsonl
from legival_core.types import Problem


def _grade(dataset: str, pred: str, gold: str, fmt: str = "auto", choices: tuple[str, ...] = ()) -> tuple[bool, str, str]:
    spec = get_dataset(dataset)
    g, read_as = grade_pred(spec.grader, pred, Problem(spec.name, "p", "q", gold, choices), "teacher", fmt)  # type: ignore[arg-type]
    return g.correct, g.status, read_as


@pytest.mark.parametrize(
    ("dataset", "pred", "gold"),
    [
        ("math", "\\frac{1}{2}", "0.5"),
        ("math", "$\\dfrac{1}{2}$", "\\frac{1}{2}"),
        ("math", "2\\sqrt{3}", "\\sqrt{12}"),
        ("math", "\\text{Monday}", "\\text{Monday}"),
        ("math", "x = 3", "3"),
        ("gpqa", "C", "C"),
        ("gpqa", "(C)", "C"),
        ("lsat", "D", "D"),
        ("gsm8k", "18", "18"),
        ("gsm8k", "$1,000", "1000"),
        ("gsm8k", "18 dollars", "18"),
    ],
)
def test_bare_answers_are_graded_as_answers(dataset: str, pred: str, gold: str) -> None:
    assert _grade(dataset, pred, gold) == (True, "ok", "answer")
    assert _grade(dataset, pred, gold, "answer") == (True, "ok", "answer")


def test_bare_math_answers_are_unparsed_as_responses() -> None:
    assert _grade("math", "\\frac{1}{2}", "0.5", "response") == (False, "unparsed", "response")
    assert _grade("gpqa", "C", "C", "response") == (False, "unparsed", "response")


@pytest.mark.parametrize(
    ("dataset", "pred", "gold", "correct"),
    [
        ("math", "So the answer is $\\frac12$.", "0.5", True),
        ("math", "We get \\boxed{4} in the end", "4", True),
        ("gsm8k", "#### 18", "18", True),
        ("gsm8k", "He had 9, then bought 9 more, so he has 18 apples in all.", "18", True),
        ("math", "We tried many things but could not finish it in time", "4", False),
    ],
)
def test_responses_are_graded_as_responses(dataset: str, pred: str, gold: str, correct: bool) -> None:
    ok, _status, read_as = _grade(dataset, pred, gold)
    assert (ok, read_as) == (correct, "response")


def test_connections_grouping_is_read_by_its_marker() -> None:
    groups = [["A", "B", "C", "D"], ["E", "F", "G", "H"], ["I", "J", "K", "L"], ["M", "N", "O", "P"]]
    gold = json.dumps(groups)
    assert _grade("connections", json.dumps({"groups": groups}), gold) == (True, "ok", "response")
    assert _grade("connections", json.dumps({"groups": groups}), gold, "answer")[:2] == (True, "ok")


@pytest.mark.parametrize(
    ("text", "single"),
    [("18", True), ("\\frac{1}{2}", True), ("(C)", True), ("C", True), ("18 dollars", True), ("x = 3", True),
     ("\\text{Monday}", True), ("Monday", True), ("no answer here", False), ("So the total comes to 18.", False),
     ("18\n19", False), ("", False), ("1" * 201, False)],
)
def test_single_expression_rule(text: str, single: bool) -> None:
    assert is_single_expression(text) is single


def test_grade_jsonl_default_reads_bare_answers(tmp_path: Path) -> None:
    src = tmp_path / "g.jsonl"
    src.write_text("".join(json.dumps({"pred": p, "gold": "\\frac{1}{2}"}) + "\n"
                           for p in ("\\frac{1}{2}", "0.5", "\\boxed{1/2}", "1/3")), encoding="utf-8")
    out = tmp_path / "o.jsonl"
    counts = grade_jsonl(src, "math", out)
    assert (counts["records"], counts["equivalent"], counts["unparsed"]) == (4, 3, 0)
    assert (counts["read_as_answer"], counts["read_as_response"]) == (3, 1)
    assert [json.loads(x)["pred_read_as"] for x in out.read_text().splitlines()] == ["answer", "answer", "response", "answer"]


# ------------------------------------------------------------------------ numbers in scientific notation


@pytest.mark.parametrize(
    ("pred", "gold", "correct", "extracted"),
    [
        ("The answer is 1e308.", "308", False, "1e308"),
        ("so it is 1e308", "308", False, "1e308"),
        ("\\boxed{1e308}", "1", False, "1e308"),
        ("\\boxed{1.5e3}", "1500", True, "1.5e3"),
        ("#### 2E+2", "200", True, "2E+2"),
    ],
)
def test_gsm8k_reads_scientific_notation_whole(pred: str, gold: str, correct: bool, extracted: str) -> None:
    g = get_dataset("gsm8k").grader(pred, "", Problem("gsm8k", "p", "q", gold), "teacher")
    assert (g.correct, g.extracted, g.status) == (correct, extracted, "ok")
    assert _grade("gsm8k", "1e308", "308") == (False, "ok", "answer")


def test_numbers_too_large_are_unparsed_never_truncated() -> None:
    assert to_fraction("1e308") == Fraction(10) ** 308 and to_fraction("2.5E-1") == Fraction(1, 4)
    assert to_fraction("1e999999999") is None and to_fraction("9" * 5000) is None
    for pred in ("\\boxed{1e999999999}", "\\boxed{" + "9" * 5000 + "}"):
        g = get_dataset("gsm8k").grader(pred, "", Problem("gsm8k", "p", "q", "9"), "teacher")
        assert (g.correct, g.status) == (False, "unparsed")


def test_student_extraction_waits_for_the_exponent() -> None:
    """Early stopping must not fire on `#### 1e` when `#### 1e3` follows (monotone extraction)."""
    assert not first_answer_complete("gsm8k", "#### 1e")
    assert not first_answer_complete("gsm8k", "#### 1e+")
    assert extract_answer("gsm8k", "#### 1e3 and done", role="student") == "1e3"
    assert extract_answer("gsm8k", "#### 18 eggs", role="student") == "18"


# ------------------------------------------------------------------------ JSONL reading


def test_jsonl_records_bom_and_unreadable_lines() -> None:
    data = b"\xef\xbb\xbf" + b'{"a": 1}\n\n' + b"[" * 5000 + b"\n[1]\n{bad\n\xff\n"
    got = list(jsonl_records(data))
    assert got[0] == (1, {"a": 1})
    assert [(i, getattr(r, "field", None)) for i, r in got[1:]] == [(3, "<json>"), (4, "<json>"), (5, "<json>"),
                                                                     (6, "<encoding>")]


def test_dataset_loader_accepts_a_bom(tmp_path: Path) -> None:
    f = tmp_path / "test.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"question": "q", "answer": "x #### 5"}).encode() + b"\n")
    assert [p.gold for p in get_dataset("gsm8k").load(f)] == ["5"]
    f.write_bytes(b"[" * 5000 + b"\n")
    with pytest.raises(ValueError, match="test.jsonl:1: bad JSON"):
        list(read_jsonl(f))
