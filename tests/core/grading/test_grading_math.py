"""MATH equivalence: the Hendrycks normalisation, math-verify in the worker, and the timeout path
(exercised for real: a request that sleeps inside the worker, and an expression sympy cannot finish)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from legival_core.grading import (
    MathVerifyWorker,
    math_equivalent,
    reset_verify_stats,
    set_default_timeout,
    strings_equivalent,
    strip_string,
    verify_stats,
)

EQUIVALENT = [
    (r"\frac12", r"\dfrac{1}{2}"),
    (r"\tfrac{1}{2}", r"\frac{1}{2}"),
    ("1/2", "0.5"),
    ("0.5", r"\frac{1}{2}"),
    (r"\sqrt2", r"\sqrt{2}"),
    (r"30^\circ", "30"),
    (r"30^{\circ}", "30"),
    (r"25\%", "25"),
    (r"(-\infty, 3]", r"(-\infty,3]"),
    ("(1,2)", "(1, 2)"),
    (r"5\text{ cm}", "5"),
    (r"5 \mbox{ inches}", "5"),
    (r"12\text{ cm}^2", "12"),
    (r"\text{(B)}", "B"),
    ("(C)", "C"),
    ("x = 3", "3"),
    ("1,000", "1000"),
    ("1{,}000", "1000"),
    (r"2\pi", r"2 \pi"),
    (r"\frac{\pi}{2}", r"\pi/2"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
    ("x^2+2x+1", "(x+1)^2"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),
    ("p - q", "p-q"),
    (r"\text{Evelyn}", "Evelyn"),
    (r"\$32", "32"),
    ("18.00", "18"),
    (r"\{1,2\}", r"\{2,1\}"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\dfrac{14}{3}", r"\frac{14}{3}"),
    (r"$\frac{14}{3}$", r"\frac{14}{3}"),
    (r"\frac{3\sqrt{2}}{4}", r"\frac{3}{4}\sqrt{2}"),
]

NOT_EQUIVALENT = [
    ("(1,2)", "(2,1)"),
    (r"(-\infty,3)", r"(-\infty,3]"),
    ("3", "4"),
    (r"\frac{1}{3}", "0.33"),
    (r"\sqrt{2}", r"\sqrt{3}"),
    ("x+1", "x-1"),
    (r"2\pi", r"\pi"),
    ("B", "C"),
    (r"\frac{14}{3}", r"\frac{3}{14}"),
    ("", "5"),
    ("1000", "100"),
]


@pytest.mark.parametrize("pred,gold", EQUIVALENT)
def test_equivalent_pairs(pred: str, gold: str) -> None:
    assert math_equivalent(pred, gold) == "equal"
    assert math_equivalent(gold, pred) == "equal"


@pytest.mark.parametrize("pred,gold", NOT_EQUIVALENT)
def test_not_equivalent_pairs(pred: str, gold: str) -> None:
    assert math_equivalent(pred, gold) == "different"


@pytest.mark.parametrize(
    "raw,norm",
    [
        (r"\left( 3, \dfrac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),
        (r"\frac12", r"\frac{1}{2}"),
        ("3/4", r"\frac{3}{4}"),
        (r"k = \sqrt3", r"\sqrt{3}"),
        (r"90^\circ", "90"),
        (r"\$1,000.", "1000"),
        (".5", r"\frac{1}{2}"),
        ("7.00", "7"),
        (r"10\%", "10"),
        (r"\text{Monday}", "Monday"),
        (r"4 \text{ square units}", "4"),
    ],
)
def test_strip_string(raw: str, norm: str) -> None:
    assert strip_string(raw) == norm


def test_units_are_kept_when_the_answer_is_not_numeric() -> None:
    assert strip_string(r"x\text{ cm}") != "x"


def test_cheap_pass_needs_no_worker() -> None:
    before = verify_stats().calls
    assert strings_equivalent(r"\dfrac{1}{2}", r"\frac12")
    assert math_equivalent(r"\dfrac{1}{2}", r"\frac12") == "equal"
    assert verify_stats().calls == before


@pytest.fixture
def worker() -> Iterator[MathVerifyWorker]:
    w = MathVerifyWorker()
    yield w
    w.close()


def test_timeout_via_sleep_inside_worker_kills_and_restarts(worker: MathVerifyWorker) -> None:
    reset_verify_stats()
    assert worker.request("sleep", 0.0, timeout_s=5) == "equal"  # starts the worker
    pid = worker.pid
    t0 = time.perf_counter()
    assert worker.request("sleep", 30.0, timeout_s=0.5) == "timeout"
    assert time.perf_counter() - t0 < 5
    assert not worker.alive
    stats = verify_stats()
    assert stats.timeouts == 1 and stats.calls == 2
    assert math_equivalent("x^2+2x+1", "(x+1)^2", worker=worker) == "equal"  # restarted
    assert worker.pid != pid
    assert verify_stats().restarts == 1
    assert reset_verify_stats().timeouts == 1
    assert verify_stats().timeouts == 0


def test_timeout_on_a_pathological_expression(worker: MathVerifyWorker) -> None:
    """sympy evaluates 9^(9^9) exactly (a 370-million-digit integer): far beyond any sane budget."""
    math_equivalent("x^2", "x*x", worker=worker)  # start-up is not charged to the timed call
    reset_verify_stats()
    t0 = time.perf_counter()
    assert math_equivalent("9^{9^{9}}", "3", timeout_s=1.0, worker=worker) == "timeout"
    assert time.perf_counter() - t0 < 4
    assert verify_stats().timeouts == 1
    assert math_equivalent("2^{10}", "1024", worker=worker) == "equal"


def test_math_grader_reports_timeout_status() -> None:
    """The grader turns a real worker timeout into Grade(status="timeout", correct=False)."""
    from legival_core.datasets import get_dataset
    from legival_core.types import Problem

    grader = get_dataset("math").grader
    problem = Problem("math", "p", "q", "3")
    assert grader(r"\boxed{2+1}", "", problem, "teacher").correct  # worker warm before timing
    old = set_default_timeout(1.0)
    try:
        grade = grader(r"The answer is \boxed{9^{9^{9}}}", "", problem, "teacher")
    finally:
        set_default_timeout(old)
    assert grade.status == "timeout" and grade.correct is False and grade.extracted == "9^{9^{9}}"
    assert grader(r"\boxed{3}", "", problem, "teacher").correct  # default worker came back
