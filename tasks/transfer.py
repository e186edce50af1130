"""One Prefect task per (teacher, dataset, student) shard: the transfer stage on the Ray executor.

The driver plans what is missing (DuckDB, under the driver lock), the Ray engine pool runs the
stage's `Work`, and each batch of finished chunks is committed in one transaction as it arrives, so
`kill -9` loses at most the chunks in flight and a rerun plans only what was not committed. It is the
same `TransferStage` that `legival transfer` runs in-process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from legival_core.spec import Execution
from legival_core.stages.base import run_stage
from legival_core.stages.transfer import TransferStage, TransferSummary
from legival_core.transfer.planner import StudentConfig
from tasks._driver import locked_store
from tasks._retry import retry_transient
from tasks.engines import RayExecutor
from tasks.progress import BOARD


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
    stage = TransferStage(config, teacher, dataset, limit, execution.traces_per_chunk)
    seen: list[int] = []

    def report(done: int, total: int) -> None:
        """The first call carries the plan's cached rollouts (not committed by this run)."""
        BOARD.shard(shard, done, total, committed=done - seen[-1] if seen else 0)
        seen.append(done)

    s = run_stage(stage, lambda: locked_store(db), RayExecutor(execution), report)
    return ShardResult(teacher, dataset, config.name, s)


def prewarm(configs: list[StudentConfig], execution: Execution) -> None:
    """Start the students' engines in the background (see `tasks.engines.EnginePool.prewarm`)."""
    ex = RayExecutor(execution)
    for config in configs:
        ex.prewarm(TransferStage(config, traces_per_chunk=execution.traces_per_chunk).work())
