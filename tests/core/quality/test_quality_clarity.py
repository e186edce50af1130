"""Clarity metrics against values worked out by hand (definitions: legival_core/quality/clarity.py)."""

from __future__ import annotations

import pytest

from legival_core.quality.clarity import (
    BUILTIN_REFERENCE,
    ClarityRaw,
    ClarityReference,
    build_reference,
    clarity,
    clarity_scores,
    count_syllables,
    definition_coverage,
    flesch_reading_ease,
    percentile,
    split_sentences,
    step_explicitness,
    syntactic_complexity,
)


def test_syllables_follow_the_authors_counter() -> None:
    assert [count_syllables(w) for w in ("the", "cat", "away", "quickly", "make", "table", "")] == [1, 1, 2, 2, 1, 3, 0]


def test_flesch_reading_ease_by_hand() -> None:
    # 2 sentences, 7 words, 9 syllables (the cat sat it ran a-way quick-ly)
    assert split_sentences("The cat sat. It ran away quickly.") == ["The cat sat.", "It ran away quickly."]
    assert flesch_reading_ease("The cat sat. It ran away quickly.") == pytest.approx(
        206.835 - 1.015 * 7 / 2 - 84.6 * 9 / 7)
    assert flesch_reading_ease("") == 0.0


def test_step_explicitness() -> None:
    assert step_explicitness("First, add 2. Then multiply by 3. Done.") == pytest.approx(2 / 3)
    assert step_explicitness("Step 1: add.\nStep 2: sum.") == 1.0
    assert step_explicitness("Nothing ordered here.") == 0.0


def test_definition_coverage() -> None:
    assert definition_coverage("Let x = 5. Then y = x + 2.") == 1.0
    assert definition_coverage("We know x + y = 10.") == 0.5
    assert definition_coverage("No symbols at all.") == 1.0


def test_syntactic_complexity() -> None:
    # 11 words, 2 sentences, 1 comma, 1 subordinator
    c = syntactic_complexity("The cat sat, and ran. It slept because it was tired.")
    assert c == pytest.approx(0.5 * 11 / 2 + 0.3 * (1 / 11) * 100 + 0.2 * 0.5)


def test_percentile_is_linear_interpolation() -> None:
    assert percentile([5, 1, 3, 2, 4], 0.05) == pytest.approx(1.2)
    assert percentile([5, 1, 3, 2, 4], 0.95) == pytest.approx(4.8)


def test_scaling_against_a_fixed_reference() -> None:
    ref = ClarityReference("t", "test", 1, fre_p5=40, fre_p95=90, ss_p5=2, ss_p95=12)
    raw = ClarityRaw(fre=65, se=0.5, dc=1.0, ss_complexity=7.0)
    s = clarity_scores(raw, ref)
    assert (s.rd, s.se, s.dc, s.ss_lite) == pytest.approx((0.5, 0.5, 1.0, 1.0))  # repo anchors SS at p95
    assert s.clx == pytest.approx(0.75)
    assert clarity_scores(raw, ref, ss_anchor="p5").ss_lite == pytest.approx(0.5)
    assert clarity_scores(ClarityRaw(200, 2, -1, 30), ref).rd == 1.0
    flat = ClarityReference("f", "flat", 1, 50, 50, 3, 3)
    assert clarity_scores(ClarityRaw(35, 0, 0, 25), flat).rd == pytest.approx(65 / 130)
    assert clarity_scores(ClarityRaw(35, 0, 0, 25), flat).ss_lite == pytest.approx(0.5)


def test_reference_is_fixed_and_round_trips() -> None:
    text = "First, let x = 3. Then x + 4 = 7. So the answer is 7."
    assert clarity(text).clx == clarity(text, BUILTIN_REFERENCE).clx
    ref = build_reference([text, "A b c. D e."], "mine", "two texts")
    assert ref.n == 2 and ClarityReference.from_json(ref.to_json()) == ref
