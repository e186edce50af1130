"""Clarity metrics against values worked out by hand (definitions: legival_core/quality/clarity.py)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

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
    ss_lite,
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
    assert (s.rd, s.se, s.dc, s.ss_lite) == pytest.approx((0.5, 0.5, 1.0, 0.5))  # the paper anchors SS at p5
    assert s.clx == pytest.approx(0.625)
    assert clarity_scores(raw, ref, ss_anchor="script").ss_lite == pytest.approx(1.0)
    assert clarity_scores(ClarityRaw(200, 2, -1, 30), ref).rd == 1.0
    flat = ClarityReference("f", "flat", 1, 50, 50, 3, 3)
    assert clarity_scores(ClarityRaw(35, 0, 0, 25), flat).rd == pytest.approx(65 / 130)
    assert clarity_scores(ClarityRaw(35, 0, 0, 25), flat).ss_lite == pytest.approx(0.5)


def test_reference_is_fixed_and_round_trips() -> None:
    text = "First, let x = 3. Then x + 4 = 7. So the answer is 7."
    assert clarity(text).clx == clarity(text, BUILTIN_REFERENCE).clx
    ref = build_reference([text, "A b c. D e."], "mine", "two texts")
    assert ref.n == 2 and ClarityReference.from_json(ref.to_json()) == ref


def test_ss_lite_both_dialects_by_hand() -> None:
    ref = ClarityReference("t", "test", 1, fre_p5=40, fre_p95=90, ss_p5=2, ss_p95=12)
    # paper: 1 - clip((c - 2) / 10); script: 1 - clip((c - 12) / 10)
    for c, paper, script in ((1, 1.0, 1.0), (2, 1.0, 1.0), (4.5, 0.75, 1.0), (7, 0.5, 1.0), (12, 0.0, 1.0),
                             (15, 0.0, 0.7), (19.5, 0.0, 0.25), (25, 0.0, 0.0)):
        assert ss_lite(c, ref) == pytest.approx(paper), c
        assert ss_lite(c, ref, "paper") == pytest.approx(paper), c
        assert ss_lite(c, ref, "script") == pytest.approx(script), c
    flat = ClarityReference("f", "flat", 1, 50, 50, 3, 3)
    assert ss_lite(10, flat, "paper") == ss_lite(10, flat, "script") == pytest.approx(0.8)  # 1 - 10/50
    with pytest.raises(ValueError, match="ss_anchor"):
        ss_lite(5, ref, "repo")  # type: ignore[arg-type]


def _traces(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _mean_ss(texts: list[str], ref: ClarityReference, anchor: str) -> float:
    return statistics.mean(clarity(t, ref, anchor).ss_lite for t in texts)  # type: ignore[arg-type]


@pytest.mark.shared
def test_ss_lite_per_model_means_fall_in_the_papers_range(shared_data: Path) -> None:
    """The paper's Table 3 reports per-model SS_lite means of 0.52-0.66. The authors' script takes
    p5/p95 over the file it scores, one GSM8K file per model, so each model is scaled against its own
    traces: with that reference the paper's form lands in the range on every shared GSM8K file
    (measured 2026-12: R1-Distill Llama-8B 0.573, Qwen-1.5B 0.547, Qwen-14B 0.542, Qwen-32B 0.544, and
    gpt-oss-120b 0.657 on the authors' own file), while the script's p95 anchor gives 0.979-0.989."""
    files = sorted((shared_data / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    assert len(files) >= 5
    for f in files:
        texts = [r["reasoning"] or "" for r in _traces(f)]
        own = build_reference(texts, f.stem, f.name)
        assert 0.52 <= _mean_ss(texts, own, "paper") <= 0.66, f.name
        assert _mean_ss(texts, own, "script") >= 0.97, f.name


@pytest.mark.shared
def test_ss_lite_on_the_md_eval_cot_human_eval_subset(shared_data: Path) -> None:
    """The 80 human-evaluated traces of the gCoT repository (16 per model). Measured 2026-12, paper form:
    per-model reference (p5/p95 over each model's 16 traces, as the authors' script would) Llama-8B
    0.714, Qwen-7B 0.487, gpt-oss-120b 0.668, gpt-oss-20b 0.635, Qwen3-4B 0.530, mean of the five 0.607;
    with the fixed built-in reference (our default) 0.274, 0.280, 0.761, 0.670, 0.520. Sixteen traces
    give a noisy p5/p95 (two models fall outside 0.52-0.66 by themselves); the mean over the five models
    is in the paper's range. The script's p95 anchor gives >= 0.96 for every model either way."""
    by_model: dict[str, list[str]] = defaultdict(list)
    for r in _traces(shared_data / "reasoning_traces" / "gsm8k_md_eval_cot_human_eval_subset" / "traces.jsonl"):
        by_model[r["model"]].append(r["reasoning"])
    assert len(by_model) == 5 and all(len(ts) == 16 for ts in by_model.values())
    paper = []
    for model, texts in by_model.items():
        own = build_reference(texts, model, "16 traces")
        paper.append(_mean_ss(texts, own, "paper"))
        for ref in (own, BUILTIN_REFERENCE):
            assert _mean_ss(texts, ref, "script") >= 0.96, model
    assert 0.52 <= statistics.mean(paper) <= 0.66
