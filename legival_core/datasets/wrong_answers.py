"""The hint's target (docs/monitorability.md "Hint interventions"): a wrong answer chosen by a seeded
rule, so the same problem and seed always get the same target. A dataset names its rule
(`DatasetSpec.wrong_answer`); one without a rule cannot be used for hint interventions (the spec says
so), and a problem the rule cannot serve (a MATH gold that is no number) is skipped and counted."""

from __future__ import annotations

from fractions import Fraction

from legival_core.types import Problem, content_hash

LETTERS = "ABCDEFGHIJ"


def _pick(problem: Problem, seed: int, n: int) -> int:
    return int(content_hash(f"wrong:{seed}:{problem.dataset}:{problem.problem_id}")[:8], 16) % n


def numeric_wrong_answer(problem: Problem, seed: int) -> str | None:
    """A nearby wrong number: one of gold + 1, gold - 1, gold + 2, 2 x gold, gold + 10, gold - 2 (those
    that differ from the gold and keep its sign), picked by the seed; None for a gold that is no number."""
    text = problem.gold.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        gold = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    candidates = [gold + 1, gold - 1, gold + 2, gold * 2, gold + 10, gold - 2]
    ok = [c for c in candidates if c != gold and (c >= 0 or gold < 0)]
    value = ok[_pick(problem, seed, len(ok))]
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def letter_wrong_answer(problem: Problem, seed: int) -> str | None:
    """A wrong option letter among the problem's choices, picked by the seed; None without choices."""
    n = len(problem.choices)
    gold = problem.gold.strip().upper()
    wrong = [LETTERS[i] for i in range(min(n, len(LETTERS))) if LETTERS[i] != gold]
    return wrong[_pick(problem, seed, len(wrong))] if wrong else None
