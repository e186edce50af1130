"""The transfer stage in a run: one job per (teacher, dataset, student) shard, and its registration.

`ShardStage` is the `TransferStage` of one shard whose plan sizes its chunks (`shard_chunk`); the
flow runs the shards of one student concurrently on its engine pool (`StageInfo.shards`), then the
next student's (`tasks.stages.run_shards`); the first student's engines start early (`prewarm`)
when the run stored new traces.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.stages.base import Executor, Plan, Progress, StoreAccess, Work, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.stages.transfer import (
    MIN_COMMITS,
    RolloutBatch,
    TransferStage,
    TransferSummary,
    Unit,
    shard_chunk,
)
from legival_core.stages.transfer_timing import Timing
from legival_core.store import Store
from legival_core.transfer.rollout_plan import StudentConfig


@dataclass(frozen=True, slots=True)
class ShardStage:
    """`TransferStage` of one (teacher, dataset, student) shard of a run, whose plan chooses the
    chunk size from the shard's size (`shard_chunk`, the plan's `chunk_size`: a small shard commits
    up to `min_commits` times; the size depends on the shard's full plan, stored or not, so a
    resumed run chunks the same way)."""

    inner: TransferStage
    min_commits: int = MIN_COMMITS

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def unit_scope(self) -> str:
        return self.inner.unit_scope

    def plan(self, store: Store) -> Plan[Unit, TransferSummary]:
        plan = self.inner.plan(store)
        plan.chunk_size = shard_chunk(plan.summary.transfer_traces, plan.summary.rollouts_total,
                                      self.inner.traces_per_chunk, self.min_commits)
        return plan

    def run(self, units: Sequence[Unit], executor: Executor) -> Iterator[list[RolloutBatch]]:
        return self.inner.run(units, executor)

    def commit(self, store: Store, results: Sequence[RolloutBatch], plan: Plan[Unit, TransferSummary]) -> int:
        return self.inner.commit(store, results, plan)


@dataclass(slots=True)
class ShardResult:
    """A shard's summary: which (teacher, dataset, student), and the stage's counts."""

    teacher: str
    dataset: str
    student: str
    summary: TransferSummary

    def as_dict(self) -> dict[str, Any]:
        return {"teacher": self.teacher, "dataset": self.dataset, "student": self.student, **self.summary.as_dict()}


def student_work_key(config: StudentConfig) -> str:
    """The key of a student's engine pool (`Work.key`)."""
    return TransferStage(config).work().key


def _transfer_jobs(ctx: RunContext) -> list[Job]:
    """One job per (student, teacher, dataset) shard, students in the spec's order (they take turns
    on the engines: `StageInfo.shards`), then the early-answer readers (`BenchmarkSpec.transfer_students`),
    each on the teachers it reads."""
    spec = ctx.spec
    if not spec.transfer.enabled:
        return []
    timing = run_timing(ctx)
    jobs = []
    for st in spec.transfer_students():
        config = spec.student_config(st)
        # an early-answer pass is not a rollout of the cost model's shape: it stores no timing to fit
        own = timing if config.mode == "continue" else None
        for t in ctx.chosen():
            if not st.reads(t.name):
                continue
            for d in spec.datasets:
                jobs.append(shard_job(config, t.name, d, spec.transfer.limit, spec.execution.traces_per_chunk, own))
    return jobs


def run_timing(ctx: RunContext) -> Timing | None:
    """Where a run's shards record their timings: the run's id (`ctx.run["run_id"]`, made when the
    run starts; none outside a run), `ctx.run["source"]` (default "run"), the engines of `execution`."""
    run_id = ctx.run.get("run_id")
    if not run_id:
        return None
    ex = ctx.spec.execution
    return Timing(str(run_id), str(ctx.run.get("source", "run")), ex.accelerator_kind, ex.max_concurrent_engines)


def shard_job(config: StudentConfig, teacher: str, dataset: str, limit: int | None, per_chunk: int,
              timing: Timing | None = None) -> Job:
    """The job of one shard: its `ShardStage` run on the executor given (the student's engine pool),
    its batches' timings stored under `timing` when given."""

    def run(access: StoreAccess, executor: Executor | None, progress: Progress | None) -> ShardResult:
        stage = ShardStage(TransferStage(config, teacher, dataset, limit, per_chunk, timing=timing))
        return ShardResult(teacher, dataset, config.name, run_stage(stage, access, executor, progress))

    plan_stage = TransferStage(config, teacher, dataset, limit, per_chunk)
    return Job("transfer", f"transfer {teacher} x {dataset} x {config.name}", run, (plan_stage,),
               release=student_work_key(config))


TRANSFER_TOTALS = ("rollouts_total", "rollouts_cached", "rollouts_generated", "forced", "overflow", "prompt_tokens",
                   "decode_tokens")


def _transfer_summary(results: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: sum(getattr(r.summary, k) for r in results) for k in TRANSFER_TOTALS}
    out["transfer_compute_s"] = round(sum(r.summary.compute_s for r in results), 3)
    out["transfer_load_s"] = round(sum(r.summary.load_s for r in results), 3)
    return out


def _first_student(ctx: RunContext) -> Work[Any, Any, Any] | None:
    """The first student's engines start while the stages before transfer run, when this run stored
    new traces (rollouts to generate); students take turns, so only the first one can load now."""
    spec = ctx.spec
    if not spec.transfer.enabled or not spec.students or ctx.run.get("counts", {}).get("new_traces", 0) <= 0:
        return None
    return TransferStage(spec.student_config(spec.students[0]), traces_per_chunk=spec.execution.traces_per_chunk).work()


register_stage("transfer", "legival transfer --db DB", needs=("grade", "segment"), requires=("segment",),
               build=_transfer_jobs, summarize=_transfer_summary, shards=True, prewarm=_first_student, order=60, retries=None,
               retry_delay_s=5, description="student rollouts on prefixes of correct traces (SPEC section 4)")
