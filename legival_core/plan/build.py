"""Build a run's plan from the spec and a store that holds every ingestible trace (`plan_benchmark`).

Every count comes from the stages' own `plan()` on that store, walked as the run walks them (the
registered stages in `needs` order, each with the jobs it has for the spec, its `requires` computed
first): the transfer stage per (teacher, dataset, student) shard as the flow runs it, with prompt
tokens and time; the efficiency, judge and quality stages with what they cost; any other stage as
its units to compute and stored. So a plan is what `legival run` will then compute, not a parallel
estimate. `scratch_plan` is what `legival
plan` runs: the store's rows copied into a scratch store (`store.scratch`), the spec's trace files ingested,
graded and segmented there with the same ingest code, and the real store left untouched.

What a run does per teacher file and per shard, the plan does for all of them at once (`plan.ingest`:
the files in one transaction; `plan.shards`: every shard of a student from one query of each kind):
a statement per file and per shard made a 2,000-teacher plan take minutes (issue 38).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legival_core.bulk import spread
from legival_core.plan.model import BenchmarkPlan, GenerationPlan, ShardPlan
from legival_core.plan.prompts import ZERO, PromptCounter, PromptTokens
from legival_core.plan.throughput import Table, ThroughputError, load_table
from legival_core.plan.timing import expected_decode, max_batch_of, shard_work, student_times
from legival_core.run_config import BenchmarkSpec, Teacher
from legival_core.stages.base import required, run_stage
from legival_core.stages.registered import Job, RunContext, stages_in_order
from legival_core.stages.transfer import MissingRollouts, TransferTrace
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.transfer.rollout_plan import StudentConfig

PLAN_SAMPLE = 256
"""Transfer traces per (teacher, dataset, student) whose prompts are tokenized; beyond it, that many
traces spread over the shard are loaded and counted and the rest estimated from their depths
(`_count_prompts`), so that a paper-scale plan neither reads every trace's text nor tokenizes it;
the shard says so."""


def plan_benchmark(spec: BenchmarkSpec, store: Store, *, teachers: list[str] | None = None,
                   table: Table | None = None, sample: int = PLAN_SAMPLE,
                   counter_for: Callable[[str, dict[str, Any]], PromptCounter] | None = None,
                   spec_name: str = "", store_name: str = "") -> BenchmarkPlan:
    """The plan of `spec` on `store` (which already holds the traces a run would ingest)."""
    chosen = _chosen(spec, teachers)
    p = BenchmarkPlan(spec_name or spec.name, store_name or str(spec.store))
    if table is None:
        try:
            table = load_table()
        except ThroughputError as e:
            p.notes.append(str(e))
    p.traces_stored = store.count("traces")
    p.generation = _generation(spec, chosen)
    if any(t.generate is not None for t in chosen):
        p.notes.append("teachers that generate: their transfer rollouts are planned once their traces exist "
                       "(run `legival plan` again after generation)")
    detailed: dict[str, Callable[[], None]] = {
        "efficiency": lambda: _efficiency(spec, store, p),
        "transfer": lambda: _transfer(spec, store, chosen, p, sample, counter_for or _local_counter, table),
        "judge": lambda: _judge(spec, store, p),
        "quality": lambda: _quality(spec, store, p),
        "interventions": lambda: _monitorability(spec, store, p, teachers),
        "hint_monitor": lambda: None,  # planned with the interventions (its units need their samples)
    }
    ctx = RunContext(spec, tuple(teachers) if teachers else None)
    for info in stages_in_order():  # as the run walks them, with what each needs computed first
        jobs = info.jobs(ctx)
        if not jobs:
            continue
        if not store.read_only:
            for pre in required(info.name):
                run_stage(pre, store)  # cheap, and what the stage reads (steps)
        if info.name in detailed:
            detailed[info.name]()
        elif any(j.stages for j in jobs):
            p.stages[info.name] = _count(jobs, store)
    if table is not None:
        student_times(spec, store, p, table)
    return p


def _count(jobs: list[Job], store: Store) -> dict[str, int]:
    """Units a stage's jobs would compute and units already stored, from their stages' own plans."""
    units = stored = 0
    for job in jobs:
        for st in job.stages:
            plan = st.plan(store)
            units += len(plan.units)
            stored += plan.done
    return {"units": units, "stored": stored}


def scratch_plan(spec: BenchmarkSpec, db: Path, *, teachers: list[str] | None = None, **kwargs: Any) -> BenchmarkPlan:
    """`legival plan`: the store's rows in a scratch copy, plus the spec's trace files ingested there.
    When no chosen teacher has trace files and the store lacks no grade or steps, the plan reads the
    store itself, opened read-only (no copy: a paper-scale store takes a minute to copy)."""
    from legival_core.plan.ingest import ingest_spec_files
    from legival_core.stages.grade import grade_store
    from legival_core.store import Store
    from legival_core.store.scratch import scratch_copy

    chosen = _chosen(spec, teachers)
    if db.exists() and all(t.generate is not None for t in chosen):
        with Store(db, read_only=True, create=False) as store:
            if _complete(store):
                p = plan_benchmark(spec, store, teachers=teachers, store_name=str(db), **kwargs)
                p.traces_new = 0
                return p
    with scratch_copy(db if db.exists() else None) as store:
        before = store.count("traces")
        ingest_spec_files(store, chosen, spec.ingest)
        grade_store(store)
        p = plan_benchmark(spec, store, teachers=teachers, store_name=str(db), **kwargs)
        p.traces_new = p.traces_stored - before
        p.traces_stored = before
        return p


def _complete(store: Store) -> bool:
    """Every trace has its grade by the current grader and its steps: planning writes nothing."""
    from legival_core.stages.efficiency import SegmentStage
    from legival_core.stages.grade import GradeStage

    return not GradeStage().plan(store).units and not SegmentStage().plan(store).units


def _chosen(spec: BenchmarkSpec, teachers: list[str] | None) -> list[Teacher]:
    return [spec.teacher(n) for n in teachers] if teachers else list(spec.teachers)


def _generation(spec: BenchmarkSpec, chosen: list[Teacher]) -> list[GenerationPlan]:
    from legival_core.datasets.base import get_dataset
    from legival_core.generation.config import load_model_config

    out = []
    problems: dict[tuple[str, str, Any], int] = {}  # teachers that generate share their problem files: read each once
    for t in chosen:
        g = t.generate
        if g is None:
            continue
        cfg = load_model_config(g.config, g.model)
        budget = g.max_new_tokens or cfg.decoding.max_new_tokens
        for dataset, path in g.jobs(spec.datasets, t.name):
            key = (dataset, str(path), g.format)
            if key not in problems:
                problems[key] = sum(1 for _ in get_dataset(dataset).load(path, g.format))
            n = len(range(problems[key])[: g.limit])
            out.append(GenerationPlan(t.name, dataset, g.model, n, n * budget))
    return out


def _efficiency(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan) -> None:
    from legival_core.stages.efficiency import EfficiencyStage

    plan = EfficiencyStage(spec.efficiency).plan(store)
    p.traces_missing_efficiency = len(plan.units)
    p.sentences_to_embed = sum(len(u.spans) for u in plan.units if u.redundancy and u.known_r is None)
    p.embedding_model = spec.efficiency.model


def _transfer(spec: BenchmarkSpec, store: Store, chosen: list[Teacher], p: BenchmarkPlan, sample: int,
              counter_for: Callable[[str, dict[str, Any]], PromptCounter], table: Table | None) -> None:
    """Each (teacher, dataset, student) shard as the flow's shard task plans it (`TransferStage.missing`,
    then `units` of its traces with work, or of a spread sample of them), every shard of a student
    read together (`plan.shards`)."""
    from legival_core.plan.shards import missing_by_cell, traces_by_cell

    for teacher, why in spec.early_answering_skipped().items():
        p.notes.append(f"early answering: teacher {teacher} has no reader ({why})")
    for st in spec.transfer_students():
        cells = [(t.name, d) for t in chosen if st.reads(t.name) for d in spec.datasets]
        config = spec.student_config(st)
        counter = counter_for(config.model, dict(config.backend_options))
        p.prompt_tokenizer[st.name] = counter.source
        student = _Student(st.name, config, counter, reads.mean_rollout_completion_tokens(store, config.student_key),
                           max_batch_of(config))
        for group in missing_by_cell(store, config, cells, spec.transfer.limit):
            read = [(cell, m.rows[spread(range(m.rows.height), sample)] if m.rows.height > sample else m.rows)
                    for cell, m in group]
            for ((teacher, d), traces), (_, m) in zip(traces_by_cell(store, read), group, strict=True):
                p.shards.append(_shard(spec, store, p, student, teacher, d, m, traces, sample, table))


@dataclass(slots=True)
class _Student:
    """What every shard of one student is planned with; `expects` the decode it expects per dataset
    (read once from its stored rollouts, not per shard)."""

    name: str
    config: StudentConfig
    counter: PromptCounter
    mean_decode: float | None
    max_batch: int | None
    expects: dict[str, Any] = field(default_factory=dict)


def _shard(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan, st: _Student, teacher: str, d: str,
           m: MissingRollouts, traces: list[TransferTrace], sample: int, table: Table | None) -> ShardPlan:
    """One shard's plan from its missing rollouts (`m`) and the traces read of it (all with work, or
    a sample beyond `sample`): counts, prompt tokens, chunks and expected work."""
    from legival_core.datasets.base import get_dataset
    from legival_core.stages.transfer import planned_units, shard_chunk

    config, s, work = st.config, m.summary, m.rows.height
    shard = ShardPlan(teacher, d, st.name, s.transfer_traces, s.rollouts_total, s.rollouts_cached,
                      s.rollouts_total - s.rollouts_cached, work)
    units = planned_units(config, traces, m.done)
    depths = _missing_depths(m.rows, m.done, config) if work > sample else None
    dataset = get_dataset(d)
    tokens, counted, sizes = _count_prompts(st.counter, dataset.system_prompt, units, work, depths)
    shard.prompt_tokens, shard.prompt_tokens_computed = tokens.requested, tokens.computed
    shard.prompt_tokens_counted = counted
    per_chunk = shard_chunk(s.transfer_traces, s.rollouts_total, spec.execution.traces_per_chunk)
    shard.chunks = -(-work // max(1, per_chunk))
    if table is not None and sizes:
        if d not in st.expects:
            st.expects[d] = expected_decode(store, config, st.counter.text_tokens(dataset.forcing_text), table.decode)
        expect = st.expects[d]
        p.decode_expected[st.name] = expect.source
        shard.work = shard_work(sizes, per_chunk, spec.execution.max_concurrent_engines, expect,
                                st.max_batch).scaled(work / len(sizes))
    # an early answer has no continuation: its one pass is the forcing pass
    shard.decode_budget = 0 if config.mode == "early_answer" else shard.rollouts_missing * config.max_new_tokens
    shard.forcing_budget = shard.rollouts_missing * config.forcing_max_tokens
    if st.mean_decode is not None:
        shard.expected_decode = round(st.mean_decode * shard.rollouts_missing)
    elif shard.rollouts_missing == 0:
        shard.expected_decode = 0
    return shard


@dataclass(frozen=True, slots=True)
class Depths:
    """A shard's missing rollouts as its step counts give them (no text): how many, the sum of their
    depths k, the traces with work, and the sum over those traces of their deepest missing k."""

    rollouts: int
    k_sum: int
    traces: int
    deepest_sum: int


def _missing_depths(rows: Any, done: Mapping[str, frozenset[int]], config: Any) -> Depths:
    from legival_core.transfer.rollout_plan import depth_bins

    n = k_sum = traces = deepest = 0
    none: frozenset[int] = frozenset()
    for tid, m in zip(rows["trace_id"].to_list(), rows["m"].to_list(), strict=True):
        stored = done.get(tid, none)
        ks = [k for k, _b in depth_bins(m, config) if k not in stored]
        if ks:
            n, k_sum, traces, deepest = n + len(ks), k_sum + sum(ks), traces + 1, deepest + max(ks)
    return Depths(n, k_sum, traces, deepest)


def _fit(x: list[int], y: list[int], x_sum: int, n: int) -> float:
    """The sum over a population of n items (their x summing to `x_sum`) of the least-squares line
    y = a + b*x fitted on a sample; a sample with a single x gives its mean times n."""
    import numpy as np

    if len(set(x)) < 2:
        return sum(y) / len(y) * n
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    return float(a * n + b * x_sum)


def _count_prompts(counter: PromptCounter, system: str, units: list[Any], traces: int,
                   depths: Depths | None = None) -> tuple[PromptTokens, str, list[tuple[str, list[int]]]]:
    """The prompt tokens of a shard's missing rollouts: `units` are all its `traces` traces with work
    (counted exactly), or a spread sample of them, from which a regression estimate extends to the
    shard's `depths`: each sampled prompt's size against its depth k (a prompt is the question plus k
    steps) fitted as a + b*k over all missing rollouts; prefix sharing's computed tokens (each trace's
    deepest prompt, plus one token per other prompt) the same way from each trace's deepest k. Also
    returns, per trace counted, its id and its prompts' sizes (the cost model's input)."""
    total = ZERO
    per_trace: list[tuple[str, list[int]]] = []
    ks: list[int] = []
    sizes: list[int] = []
    deep_k: list[int] = []
    deep: list[int] = []
    for trace, plans in units:
        if not plans:
            continue
        got = counter.sizes(system, trace.problem.question, plans)
        per_trace.append((trace.trace_id, got))
        total = total + PromptTokens(sum(got), max(got) + len(got) - 1)
        ks += [r.k for r in plans]
        sizes += got
        deep_k.append(max(r.k for r in plans))
        deep.append(max(got))
    if len(units) >= traces or depths is None or not sizes:
        return total, "exact" if counter.exact else "estimate", per_trace
    requested = _fit(ks, sizes, depths.k_sum, depths.rollouts)
    computed = _fit(deep_k, deep, depths.deepest_sum, depths.traces) + depths.rollouts - depths.traces
    return (PromptTokens(round(requested), round(computed)), f"scaled from {len(units)} of {traces} traces",
            per_trace)


def _local_counter(model: str, options: dict[str, Any]) -> PromptCounter:
    from legival_core.backends.tokenizer import local_tokenizer

    tok, source = local_tokenizer(model, options)
    return PromptCounter(tok, source)


def _judge(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan) -> None:
    from legival_core.judges.factory import judge_info
    from legival_core.stages.judge import run_judge

    if not judge_info(spec.judge.name).llm:
        p.judge = {"name": spec.judge.name, "calls": 0, "cost_usd": 0.0,
                   "note": "computed locally (no model calls)"}
        return
    s = run_judge(store, spec.judge, estimate_only=True)
    p.judge = {"name": spec.judge.name, "model": s.model, "calls": s.todo, "cached": s.cached,
               "input_tokens": s.estimated_input_tokens, "output_tokens": s.estimated_output_tokens,
               "cost_usd": round(s.estimated_cost_usd, 4)}
    if s.estimate_basis:
        p.judge["note"] = f"estimate {s.estimate_basis}"


def _monitorability(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan, teachers: list[str] | None) -> None:
    from legival_core.plan.monitorability import plan_monitorability

    p.monitorability = plan_monitorability(spec, store, teachers)


def _quality(spec: BenchmarkSpec, store: Store, p: BenchmarkPlan) -> None:
    from legival_core.quality.group import resolve_groups
    from legival_core.stages.quality import QualityStage

    for group in resolve_groups(list(spec.quality.metrics) if spec.quality.metrics else None):
        p.quality[group] = len(QualityStage(group).plan(store).units)
