"""The transfer cost model: the seconds an engine spends on a chunk of rollouts (docs/orchestration.md,
"The cost model").

An engine (a student model replica) runs a chunk as one or two generate calls: the first pass over
every rollout of the chunk's traces, and the forcing pass over the rollouts that gave no answer.
What a call costs is measured on the machines here (`benchmarks/plan_time.py`) to follow five
quantities, its `EngineWork`:

    seconds = chunks * chunk_s                 fixed cost of a chunk (tokenizing, grading, the calls)
            + prefill / prefill_tok_s          prompt tokens computed (after prefix sharing)
            + decode_steps * decode_step_s                   forward passes: each reads every weight once, whatever
                                               the batch (a prefilled prompt, a decode step of a batch)
            + decode / decode_tok_s            tokens generated (their per-row compute)
            + context / context_tok_s          attention: for every generated token, the tokens before
                                               it (a 3,000-token prefix makes each step ~60x dearer
                                               than the rollout's 48 new tokens suggest)

Decode steps follow the batch: a call's rollouts are decoded `max_batch` rows at a time, and a batch
runs until its longest row stops, so a call of n rollouts takes ceil(n / max_batch) x (longest
completion - 1) steps (its first token comes from the prefill). The same formulas give the work of
a finished call (`pass_work`, from its completions: what the run records) and of a planned chunk
(`planned_chunk`, from the prompt sizes the plan counted and the decode it expects: `Expected`), so
calibrating the rates on recorded runs and planning with them use one model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from legival_core.backends.base import Completion


@dataclass(frozen=True, slots=True)
class EngineWork:
    """What one or more generate calls cost an engine, in the cost model's units."""

    chunks: float = 0
    prefill: float = 0
    decode_steps: float = 0
    decode: float = 0
    context: float = 0

    def __add__(self, other: EngineWork) -> EngineWork:
        return EngineWork(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, factor: float) -> EngineWork:
        return EngineWork(*(getattr(self, f.name) * factor for f in fields(self)))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


NO_WORK = EngineWork()


@dataclass(frozen=True, slots=True)
class Rates:
    """One engine's rates (a throughput row of `configs/throughput.yaml`, or its calibration)."""

    chunk_s: float
    prefill_tok_s: float
    decode_step_s: float
    decode_tok_s: float
    context_tok_s: float
    load_s: float
    """Starting the engines: the model loaded, Ray and the actors started (the plan adds it once per
    student; the engines load in parallel)."""

    def seconds(self, work: EngineWork) -> float:
        """Engine-seconds of `work` (the load not included)."""
        return (work.chunks * self.chunk_s + work.prefill / self.prefill_tok_s + work.decode_steps * self.decode_step_s
                + work.decode / self.decode_tok_s + work.context / self.context_tok_s)

    def times(self, factor: float) -> Rates:
        """Every cost `factor` times larger (a calibration keeps the row's proportions), the load apart."""
        return Rates(self.chunk_s * factor, self.prefill_tok_s / factor, self.decode_step_s * factor,
                     self.decode_tok_s / factor, self.context_tok_s / factor, self.load_s)


def batches(rows: int, max_batch: int | None) -> int:
    """Decode batches of a call of `rows` rows (`max_batch` None: the engine takes them all at once)."""
    if rows <= 0:
        return 0
    return 1 if max_batch is None else math.ceil(rows / max_batch)


def decode_context(prompt: float, completion: float) -> float:
    """Tokens attended to while generating `completion` tokens after a `prompt`-token prompt: the
    first new token attends to the prompt, each next one to one token more."""
    return completion * prompt + completion * (completion - 1) / 2


def pass_work(completions: Sequence[Completion], max_batch: int | None) -> EngineWork:
    """The work of one finished generate call: its prompts prefilled (each computed one its own
    forward pass), its decode steps (`batches` x the longest completion), tokens and context."""
    live = [c for c in completions if c.finish_reason != "overflow"]
    if not live:
        return NO_WORK
    longest = max(c.completion_tokens for c in live)
    decoding = sum(1 for c in live if c.completion_tokens > 0)
    prefilled = sum(1 for c in live if c.prefill_computed > 0)
    return EngineWork(
        chunks=0,
        prefill=sum(c.prefill_computed for c in live),
        decode_steps=prefilled + batches(decoding, max_batch) * max(0, longest - 1),
        decode=sum(c.completion_tokens for c in live),
        context=sum(decode_context(c.prompt_tokens, c.completion_tokens) for c in live),
    )


@dataclass(frozen=True, slots=True)
class PassDecode:
    """What one pass of a rollout is expected to generate: `mean` tokens, `at_budget` the share of
    rollouts that run to the pass's `budget` (the longest row of a batch sets its steps)."""

    mean: float
    at_budget: float
    budget: int

    def longest(self, rows: int) -> float:
        """Expected longest completion among `rows` rows: the budget when one of them runs to it
        (probability 1 - (1 - at_budget)^rows), else about the mean of those that stop early."""
        if rows <= 0:
            return 0.0
        none_at_budget = (1 - self.at_budget) ** rows
        early = min(self.mean, self.budget) if self.at_budget >= 1 else max(
            0.0, (self.mean - self.at_budget * self.budget) / (1 - self.at_budget))
        return self.budget * (1 - none_at_budget) + early * none_at_budget


@dataclass(frozen=True, slots=True)
class Expected:
    """The decode a plan expects of a student's rollouts: the first pass, the share forced, the
    forcing pass (tokens of the forcing text included in its prompt), and where the figures come
    from (stored rollouts of the student, or the labelled default)."""

    first: PassDecode
    forced_share: float
    forced: PassDecode
    forcing_text_tokens: int
    source: str


def planned_chunk(traces: Sequence[Sequence[int]], expect: Expected, max_batch: int | None) -> EngineWork:
    """The expected work of one chunk: `traces` holds, per trace of the chunk, the prompt tokens of
    its rollouts (the plan's count, one per depth). First pass: each trace's deepest prompt computed
    once and one token for each other (prefix sharing, as counted by the plan); the forcing pass:
    each forced rollout's prompt grows by its continuation and the forcing text, a trace's first
    forced prompt computed in full, the others from its cache."""
    sizes = [s for t in traces for s in t]
    n = len(sizes)
    if n == 0:
        return NO_WORK
    first, forced, share = expect.first, expect.forced, expect.forced_share
    computed = sum(max(t) + len(t) - 1 for t in traces if t)
    work = EngineWork(
        chunks=1, prefill=computed,
        decode_steps=sum(1 for t in traces if t) + batches(n, max_batch) * max(0.0, first.longest(min(n, max_batch or n)) - 1),
        decode=n * first.mean,
        context=sum(decode_context(s, first.mean) for s in sizes),
    )
    f = n * share
    if f <= 0:
        return work
    grown = first.mean + expect.forcing_text_tokens
    roots = sum(1 - (1 - share) ** len(t) for t in traces if t)  # traces with at least one forced rollout
    mean_size = sum(sizes) / n
    rows = max(1, round(f))
    return work + EngineWork(
        chunks=0,
        prefill=roots * mean_size + f * grown,
        decode_steps=f + batches(rows, max_batch) * max(0.0, forced.longest(min(rows, max_batch or rows)) - 1),
        decode=f * forced.mean,
        context=share * sum(decode_context(s + grown, forced.mean) for s in sizes),
    )
