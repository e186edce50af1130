"""The plan's transfer time: each shard's expected work in the cost model's units, and the seconds it
takes at an engine's rates (docs/orchestration.md, "The cost model").

A shard's work is summed chunk by chunk as the run will send them: its traces with missing rollouts
routed to the engines as the Ray pool routes them (`engine_for`), cut into chunks of the shard's
chunk size, each chunk's expected work from its rollouts' prompt sizes (counted by the plan) and the
decode the plan expects of the student (`expected_decode`: from its stored rollouts when there are
any, else the table's labelled default). A student's wall time is one engine load plus its shards'
engine seconds spread over its engines; students take turns on the engines, so a run's transfer
time is their sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from legival_core.backends.base import BackendInfo
from legival_core.catalog import canonical_model
from legival_core.plan.calibration import EngineRates, Signature, calibrated
from legival_core.plan.model import BenchmarkPlan, StudentTime
from legival_core.plan.throughput import DecodeDefaults, Table, ThroughputError
from legival_core.registry import entry
from legival_core.run_config import BenchmarkSpec
from legival_core.stages.base import engine_for
from legival_core.store import Store
from legival_core.store.timings import decode_counts
from legival_core.transfer.cost import (
    NO_WORK,
    EngineWork,
    Expected,
    PassDecode,
    decode_context,
    planned_chunk,
)
from legival_core.transfer.rollout_plan import StudentConfig


def shard_work(traces: Sequence[tuple[str, Sequence[int]]], per_chunk: int, engines: int, expect: Expected,
               max_batch: int | None) -> EngineWork:
    """The expected work of a shard whose traces with missing rollouts are `traces` (trace id, the
    prompt tokens of its missing rollouts), in the run's order and chunks."""
    per_engine: list[list[Sequence[int]]] = [[] for _ in range(max(1, engines))]
    for trace_id, sizes in traces:
        if sizes:
            per_engine[engine_for(trace_id, len(per_engine))].append(sizes)
    size = max(1, per_chunk)
    work = NO_WORK
    for mine in per_engine:
        for i in range(0, len(mine), size):
            work = work + planned_chunk(mine[i : i + size], expect, max_batch)
    return work


def expected_decode(store: Store, config: StudentConfig, forcing_text_tokens: int,
                    defaults: DecodeDefaults) -> Expected:
    """What the student's rollouts will generate: measured on its stored rollouts (same student key:
    model, decoding, prompt version, profile) when there are any, else the labelled default."""
    budget, forcing = config.max_new_tokens, config.forcing_max_tokens
    c = decode_counts(store, config.student_key, budget, forcing)
    if c.rollouts == 0:
        return Expected(
            PassDecode(defaults.first_share * budget, defaults.first_at_budget, budget), defaults.forced_share,
            PassDecode(min(defaults.forced_tokens, forcing), defaults.forced_at_budget, forcing), forcing_text_tokens,
            f"default: {defaults.source}")
    if c.forced_after_budget:
        forced_mean = max(0.0, c.forced_after_budget_tokens / c.forced_after_budget - budget)
        forced_at = c.forced_at_forcing_budget / c.forced_after_budget
    else:
        forced_mean, forced_at = min(defaults.forced_tokens, forcing), defaults.forced_at_budget
    others = c.forced - c.forced_after_budget  # forced after stopping early: their split is estimated
    first_tokens = (c.unforced_tokens + budget * c.forced_after_budget
                    + max(0.0, c.forced_other_tokens - forced_mean * others))
    return Expected(
        PassDecode(first_tokens / c.rollouts, c.at_budget / c.rollouts, budget), c.forced / c.rollouts,
        PassDecode(forced_mean, forced_at, forcing), forcing_text_tokens,
        f"measured on {c.rollouts:,} stored rollouts of the student")


@dataclass(frozen=True, slots=True)
class WallTime:
    """One student's transfer: its engines' load, its rollouts' engine seconds, and the wall time."""

    load_s: float
    compute_s: float
    seconds: float
    low_s: float
    high_s: float


def wall_time(works: Sequence[EngineWork], rates: EngineRates, engines: int) -> WallTime:
    """An engine load, then the shards' engine seconds spread over the engines (they share the
    chunks; the tail is short next to a shard's many chunks). Nothing to do: no load either."""
    compute = sum(rates.rates.seconds(w) for w in works)
    load = rates.rates.load_s if compute > 0 else 0.0
    seconds = load + compute / max(1, engines)
    return WallTime(load, compute, seconds, seconds / rates.spread, seconds * rates.spread)


def max_batch_of(config: StudentConfig) -> int | None:
    """Rows the student's backend decodes together: its `max_batch` option, else its registered default."""
    option = config.backend_options.get("max_batch")
    if option is not None:
        return int(option)
    meta = entry("backend", config.backend).meta
    return meta.max_batch if isinstance(meta, BackendInfo) else None


def engine_rates(store: Store, table: Table, config: StudentConfig, accelerator: str) -> EngineRates | str:
    """The student's engine rates: calibrated on this store's records of its engine when there are
    any, else its throughput row's; a string says why there are none."""
    if not accelerator:
        return "set execution.accelerator (a kind in configs/throughput.yaml) to estimate time"
    try:
        row = table.row(config.model, accelerator)
    except ThroughputError as e:
        return str(e)
    sig = Signature(canonical_model(config.model), config.backend, config.dtype, accelerator)
    return calibrated(store, row, sig) or EngineRates(row.rates(), row.basis, row.spread, row.source)


def student_times(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan, table: Table) -> None:
    """Each student's transfer time (and each shard's engine seconds), then each generating teacher's
    at its full decode budget."""
    ex = spec.execution
    accelerator, engines = ex.accelerator_kind, ex.max_concurrent_engines
    for st in spec.transfer_students():
        config = spec.student_config(st)
        t = StudentTime(st.name, config.model, accelerator or "?", engines, decode=p.decode_expected.get(st.name, ""))
        p.times.append(t)
        rates = engine_rates(store, table, config, accelerator)
        if isinstance(rates, str):
            t.unavailable = rates
            continue
        mine = [s for s in p.shards if s.student == st.name]
        for s in mine:
            s.seconds = round(rates.rates.seconds(s.work), 1) if s.work is not None else 0.0
        wall = wall_time([s.work for s in mine if s.work is not None], rates, engines)
        _fill(t, wall, rates, ex.gpus_per_engine)
    for teacher in dict.fromkeys(g.teacher for g in p.generation):
        gens = [g for g in p.generation if g.teacher == teacher]
        t = StudentTime(teacher, gens[0].model, accelerator or "?", engines)
        p.generation_times.append(t)
        if not accelerator:
            t.unavailable = "set execution.accelerator (a kind in configs/throughput.yaml) to estimate time"
            continue
        try:
            row = table.row(gens[0].model, accelerator)
        except ThroughputError as e:
            t.unavailable = str(e)
            continue
        g = spec.teacher(teacher).generate
        batch = g.batch_size if g is not None else 1
        work = sum((generation_work(x.problems, x.decode_budget // max(1, x.problems), batch) for x in gens), NO_WORK)
        rates = EngineRates(row.rates(), row.basis, row.spread, row.source)
        _fill(t, wall_time([work], rates, engines), rates, ex.gpus_per_engine)


def generation_work(problems: int, budget: int, batch: int) -> EngineWork:
    """A teacher's generations at their full budget (an upper bound): calls of `batch` problems, each
    decoding `budget` steps; the prompts' few hundred tokens are left out next to the budget."""
    calls = math.ceil(problems / max(1, batch))
    return EngineWork(chunks=calls, prefill=0, decode_steps=calls * budget, decode=problems * budget,
                      context=problems * decode_context(0, budget))


def _fill(t: StudentTime, wall: WallTime, rates: EngineRates, gpus_per_engine: float) -> None:
    t.seconds = math.ceil(wall.seconds)
    t.low_s, t.high_s = (math.floor(wall.low_s), math.ceil(wall.high_s)) if rates.spread > 1 else (t.seconds, t.seconds)
    t.load_s, t.compute_s = round(wall.load_s, 1), round(wall.compute_s, 1)
    t.gpu_hours = round(t.seconds * t.engines * gpus_per_engine / 3600, 3)
    t.basis, t.source = rates.basis, rates.source
