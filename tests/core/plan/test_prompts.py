"""Prompt tokens counted without a model (`legival_core.plan.prompts`) against the backends' way:
every prompt rendered with the chat template and tokenized in full (the shipped SmolLM2 tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legival_core.plan.prompts import PromptCounter
from legival_core.run_config import student_config
from legival_core.segment import sentence_spans
from legival_core.transfer.rollout_plan import plan_trace, student_messages
from legival_core.types import Steps
from tests.conftest import REPO

TRACES = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
SYSTEM = "Solve the problem step by step. End with 'The answer is N'."


@pytest.fixture(scope="module")
def tokenizer():
    from legival_core.backends.tokenizer import local_tokenizer

    tok, source = local_tokenizer("smollm2-135m")
    assert tok is not None, source
    return tok


def _traces(n: int) -> list[tuple[str, list]]:
    out = []
    for line in Path(TRACES).read_text(encoding="utf-8").splitlines()[:n]:
        r = json.loads(line)
        steps = Steps(r["reasoning"], sentence_spans(r["reasoning"]))
        for profile in ("spec", "preprint"):
            plans = plan_trace(r["problem_id"], steps, student_config(profile=profile, step_interval=3))
            out.append((r["problem"], plans))
    return out


def _exact(tok, question: str, prefix: str) -> int:
    from legival_core.backends.prompt_format import render_chat_with

    text = render_chat_with(tok, student_messages(SYSTEM, question, prefix), True)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_cut_counts_equal_full_tokenization_on_real_traces(tokenizer) -> None:
    counter = PromptCounter(tokenizer, "smollm2")
    total_plan = total_exact = 0
    for question, plans in _traces(24):
        sizes = counter.sizes(SYSTEM, question, plans)
        exact = [_exact(tokenizer, question, p.prefix) for p in plans]
        assert all(abs(a - b) <= 1 for a, b in zip(sizes, exact, strict=True)), (sizes, exact)
        total_plan += sum(sizes)
        total_exact += sum(exact)
    assert total_exact > 10_000
    assert abs(total_plan - total_exact) / total_exact < 0.001


def test_subset_of_depths_and_prefix_sharing(tokenizer) -> None:
    counter = PromptCounter(tokenizer, "smollm2")
    question, plans = _traces(1)[0]
    some = plans[1::2]
    assert counter.sizes(SYSTEM, question, some) == [_exact(tokenizer, question, p.prefix) for p in some]
    counted = counter.count(SYSTEM, question, plans)
    sizes = [_exact(tokenizer, question, p.prefix) for p in plans]
    assert counted.requested == sum(sizes)
    assert counted.computed == max(sizes) + len(sizes) - 1  # the deepest prompt once, one token per other


def test_estimate_without_tokenizer_is_flagged_and_close(tokenizer) -> None:
    estimate = PromptCounter(None, "no tokenizer here")
    assert not estimate.exact and estimate.source.startswith("estimate with tiktoken cl100k_base")
    got = exact = 0
    for question, plans in _traces(10):
        got += sum(estimate.sizes(SYSTEM, question, plans))
        exact += sum(_exact(tokenizer, question, p.prefix) for p in plans)
    assert 0.7 < got / exact < 1.3  # another tokenizer: an order of magnitude, labelled as such


def test_scaled_count_of_a_large_shard_is_close_to_counting_all(tokenizer) -> None:
    """Past `sample` traces a shard counts a spread sample and estimates the rest from their depths."""
    from legival_core.bulk import spread
    from legival_core.plan.build import Depths, _count_prompts
    from legival_core.stages.transfer import TransferTrace
    from legival_core.types import Problem

    counter = PromptCounter(tokenizer, "smollm2")
    units = []
    for i, line in enumerate(Path(TRACES).read_text(encoding="utf-8").splitlines()):
        r = json.loads(line)
        steps = Steps(r["reasoning"], sentence_spans(r["reasoning"]))
        t = TransferTrace(f"t{i}", "t", "gsm8k", Problem("gsm8k", r["problem_id"], r["problem"], "0"), steps)
        units.append((t, plan_trace(t.trace_id, steps, student_config())))
    exact, how, sizes = _count_prompts(counter, SYSTEM, units, len(units))
    depths = Depths(sum(len(plans) for _, plans in units), sum(r.k for _, plans in units for r in plans),
                    len(units), sum(max(r.k for r in plans) for _, plans in units))
    sample = spread(units, 20)
    scaled, how_scaled, sampled = _count_prompts(counter, SYSTEM, sample, len(units), depths)
    assert how == "exact" and how_scaled == f"scaled from 20 of {len(units)} traces"
    assert abs(scaled.requested - exact.requested) / exact.requested < 0.05
    assert abs(scaled.computed - exact.computed) / exact.computed < 0.1
    assert scaled.requested != exact.requested  # estimated from the sample, not counted
    # each counted trace's prompt sizes (the cost model's input): all of them, then the sample's
    assert [t for t, _ in sizes] == [t.trace_id for t, _ in units] and len(sampled) == 20
    assert sum(map(sum, (s for _, s in sizes))) == exact.requested
