"""The transfer cost model (`legival_core.transfer.cost`), checked by hand."""

from __future__ import annotations

import pytest

from legival_core.backends.base import Completion
from legival_core.transfer.cost import (
    EngineWork,
    Expected,
    PassDecode,
    Rates,
    batches,
    decode_context,
    pass_work,
    planned_chunk,
)


def _c(prompt: int, completion: int, computed: int, finish: str = "length") -> Completion:
    return Completion("r", "x", prompt, completion, finish, computed, prompt - computed)  # type: ignore[arg-type]


def test_decode_context_counts_every_token_before_each_new_one() -> None:
    # 3 new tokens after 10: they attend to 10, 11 and 12 tokens
    assert decode_context(10, 3) == 10 + 11 + 12
    assert decode_context(10, 0) == 0


def test_batches() -> None:
    assert [batches(n, 16) for n in (0, 1, 16, 17, 33)] == [0, 1, 1, 2, 3]
    assert batches(500, None) == 1


def test_pass_work_of_a_finished_call() -> None:
    # a root prefilled in full (100 tokens), one row served from its cache, one partly (20 computed),
    # one overflow (not computed at all); batches of 2: 2 batches x (longest 5 - 1) decode steps
    calls = [_c(100, 5, 100), _c(80, 3, 0), _c(90, 4, 20), _c(5000, 0, 0, "overflow")]
    w = pass_work(calls, max_batch=2)
    assert w == EngineWork(chunks=0, prefill=120, decode_steps=2 + 2 * 4, decode=12,
                           context=decode_context(100, 5) + decode_context(80, 3) + decode_context(90, 4))
    assert pass_work(calls, None).decode_steps == 2 + 1 * 4  # one batch when the engine takes every row
    assert pass_work([_c(10, 0, 0, "overflow")], 2) == EngineWork()


def test_rates_seconds_and_calibration_factor() -> None:
    r = Rates(chunk_s=0.5, prefill_tok_s=100, decode_step_s=0.1, decode_tok_s=1000, context_tok_s=10_000, load_s=7)
    w = EngineWork(chunks=2, prefill=300, decode_steps=50, decode=2000, context=40_000)
    assert r.seconds(w) == pytest.approx(1 + 3 + 5 + 2 + 4)
    assert r.times(2).seconds(w) == pytest.approx(30) and r.times(2).load_s == 7
    assert (w + w).scaled(0.5) == w


def test_longest_completion_of_a_batch() -> None:
    always = PassDecode(mean=48, at_budget=1.0, budget=48)
    assert always.longest(3) == 48
    never = PassDecode(mean=10, at_budget=0.0, budget=48)
    assert never.longest(16) == 10
    half = PassDecode(mean=30, at_budget=0.5, budget=48)  # the early half averages 12 tokens
    assert half.longest(1) == pytest.approx(0.5 * 48 + 0.5 * 12)
    assert half.longest(4) == pytest.approx(48 * (1 - 0.5**4) + 12 * 0.5**4)
    assert half.longest(0) == 0


def test_planned_chunk_by_hand() -> None:
    """Two traces (prompts of 100 and 120 tokens; one of 50), batches of 2, every first pass at its
    budget of 4 tokens, a quarter forced with 2-token forcing passes and a 3-token forcing text."""
    expect = Expected(PassDecode(4, 1.0, 4), 0.25, PassDecode(2, 0.0, 10), 3, "test")
    w = planned_chunk([[100, 120], [50]], expect, max_batch=2)
    first = EngineWork(chunks=1, prefill=(120 + 1) + 50, decode_steps=2 + 2 * 3, decode=3 * 4,
                       context=sum(decode_context(s, 4) for s in (100, 120, 50)))
    f = 3 * 0.25
    roots = (1 - 0.75**2) + (1 - 0.75)  # traces with at least one forced rollout, expected
    forced = EngineWork(chunks=0, prefill=roots * (270 / 3) + f * (4 + 3), decode_steps=f + 1 * (2 - 1), decode=f * 2,
                        context=0.25 * sum(decode_context(s + 7, 2) for s in (100, 120, 50)))
    got, want = w.as_dict(), (first + forced).as_dict()
    assert got == pytest.approx(want)
    assert planned_chunk([], expect, 2) == EngineWork()
    no_forcing = Expected(PassDecode(4, 1.0, 4), 0.0, PassDecode(2, 0.0, 10), 3, "test")
    assert planned_chunk([[100, 120], [50]], no_forcing, 2) == first
