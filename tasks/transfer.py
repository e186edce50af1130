"""One Prefect task per (teacher, dataset, student) shard: the transfer stage on the Ray executor.

The driver plans what is missing (DuckDB, under the driver lock), the Ray engine pool runs the
stage's `Work`, and each batch of finished chunks is committed in one transaction as it arrives, so
`kill -9` loses at most the chunks in flight and a rerun plans only what was not committed. It is the
same `TransferStage` that `legival transfer` runs in-process.

Progress moves per committed batch, and a batch is one finished chunk of `traces_per_chunk` traces
(each with all its missing depths). A shard with at most `traces_per_chunk` traces (the demo's
17-rollout shard: 2 traces, `traces_per_chunk: 2`) was therefore ONE chunk, and its progress jumped
from 0 to 100%. `ShardStage` lowers a small shard's chunk (`legival_core.stages.transfer.shard_chunk`,
which `legival plan` uses too) so that it commits up to
`MIN_COMMITS` times, as long as a chunk keeps about `CHUNK_ROLLOUTS` rollouts: the backend batches a
chunk's rollouts, and smaller calls cost forward passes. Measured on the demo (embedded student,
forward passes per shard, one chunk vs one chunk per trace): 112 vs 115 for the 17-rollout shard
(8 + 9 rollouts), but 61 vs 111 for a 7-rollout one; so the first is cut per trace and the second
stays one chunk. A chunk never splits a trace (its rollouts share one prefill of the longest prefix).
Large shards keep `traces_per_chunk`. The size depends on the shard's full plan (traces and rollouts,
stored or not), so a resumed run chunks the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from legival_core.spec import Execution
from legival_core.stages.base import Executor, Plan, run_stage
from legival_core.stages.transfer import (
    MIN_COMMITS,
    RolloutBatch,
    TransferStage,
    TransferSummary,
    Unit,
    shard_chunk,
)
from legival_core.store import Store
from legival_core.transfer.rollout_plan import StudentConfig
from tasks._driver import locked_store
from tasks._retry import retry_transient
from tasks.prefect_ui import run_logger
from tasks.progress import BOARD
from tasks.ray_pool import RayExecutor


@dataclass(slots=True)
class ShardResult:
    """A shard's summary: which (teacher, dataset, student), and the stage's counts."""

    teacher: str
    dataset: str
    student: str
    summary: TransferSummary

    def as_dict(self) -> dict[str, Any]:
        return {"teacher": self.teacher, "dataset": self.dataset, "student": self.student, **self.summary.as_dict()}


@task(name="transfer-shard", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5,
      retry_condition_fn=retry_transient, task_run_name="transfer {teacher} x {dataset} x {config.name}")
def transfer_shard_task(db: str, config: StudentConfig, teacher: str, dataset: str, limit: int | None,
                        execution: Execution) -> ShardResult:
    return run_shard(db, config, teacher, dataset, limit, execution)


def run_shard(db: str, config: StudentConfig, teacher: str, dataset: str, limit: int | None,
              execution: Execution) -> ShardResult:
    shard = f"{teacher} x {dataset} x {config.name}"
    stage = ShardStage(TransferStage(config, teacher, dataset, limit, execution.traces_per_chunk))
    seen: list[int] = []

    def report(done: int, total: int) -> None:
        """The first call carries the plan's cached rollouts (not committed by this run)."""
        BOARD.shard(shard, done, total, committed=done - seen[-1] if seen else 0)
        seen.append(done)

    s = run_stage(stage, lambda: locked_store(db), RayExecutor(execution), report)
    run_logger().info("transfer %s: %d rollouts, %d cached, %d generated (%d forced, %d overflow)", shard,
                      s.rollouts_total, s.rollouts_cached, s.rollouts_generated, s.forced, s.overflow)
    return ShardResult(teacher, dataset, config.name, s)


@dataclass(slots=True)
class ShardStage:
    """`TransferStage` whose chunk size `plan` sets from the shard's size (module docstring)."""

    inner: TransferStage
    min_commits: int = MIN_COMMITS

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def requires(self) -> tuple[Any, ...]:
        return self.inner.requires

    def plan(self, store: Store) -> Plan[Unit, TransferSummary]:
        plan = self.inner.plan(store)
        chunk = shard_chunk(plan.summary.transfer_traces, plan.summary.rollouts_total, self.inner.traces_per_chunk,
                            self.min_commits)
        self.inner = replace(self.inner, traces_per_chunk=chunk)
        return plan

    def run(self, units: Sequence[Unit], executor: Executor) -> Iterator[list[RolloutBatch]]:
        return self.inner.run(units, executor)

    def commit(self, store: Store, results: Sequence[RolloutBatch], plan: Plan[Unit, TransferSummary]) -> int:
        return self.inner.commit(store, results, plan)


def student_work_key(config: StudentConfig) -> str:
    """The key of a student's engine pool (`Work.key`)."""
    return TransferStage(config).work().key


def prewarm(configs: list[StudentConfig], execution: Execution) -> None:
    """Start the first student's engines in the background (see `tasks.ray_pool.EnginePool.prewarm`):
    students take turns on the engines (`flows.transfer`), so only the first one can load now."""
    if configs:
        RayExecutor(execution).prewarm(TransferStage(configs[0], traces_per_chunk=execution.traces_per_chunk).work())
