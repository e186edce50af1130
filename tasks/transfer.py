"""One Prefect task per (teacher, dataset, student) shard; the rollouts fan out on Ray.

The driver plans what is missing (DuckDB, under the driver lock), hands the work units to the
student's engine pool, and commits each batch of finished chunks in one transaction as it arrives,
so `kill -9` loses at most the chunks in flight and a rerun plans only what was not committed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from legival_core.spec import Execution
from legival_core.stages.transfer import commit_rollouts, plan_missing
from legival_core.transfer.planner import StudentConfig
from tasks._driver import locked_store
from tasks._retry import retry_transient
from tasks.engines import get_pool
from tasks.progress import BOARD


@dataclass(slots=True)
class ShardResult:
    teacher: str
    dataset: str
    student: str
    transfer_traces: int = 0
    rollouts_total: int = 0
    rollouts_cached: int = 0
    rollouts_generated: int = 0
    forced: int = 0
    overflow: int = 0
    prefill_computed: int = 0
    prefill_cached: int = 0
    decode_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@task(name="transfer-shard", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5,
      retry_condition_fn=retry_transient, task_run_name="transfer {teacher} x {dataset} x {config.name}")
def transfer_shard_task(db: str, config: StudentConfig, teacher: str, dataset: str, limit: int | None,
                        execution: Execution) -> ShardResult:
    return run_shard(db, config, teacher, dataset, limit, execution)


def run_shard(db: str, config: StudentConfig, teacher: str, dataset: str, limit: int | None,
              execution: Execution) -> ShardResult:
    shard = f"{teacher} x {dataset} x {config.name}"
    with locked_store(db) as store:
        plan = plan_missing(store, config, teacher, dataset, limit)
    s = plan.summary
    r = ShardResult(teacher, dataset, config.name, s.transfer_traces, s.rollouts_total, s.rollouts_cached)
    done = s.rollouts_cached
    BOARD.shard(shard, done, s.rollouts_total)
    if not plan.todo:
        return r
    for batch in get_pool(config, execution).run(plan.todo, execution.traces_per_chunk):
        rows = [row for res in batch for row in res.rows]
        with locked_store(db) as store:
            commit_rollouts(store, rows)
        for res in batch:
            for k, v in res.stats.items():
                setattr(r, k, getattr(r, k) + v)
        r.rollouts_generated += len(rows)
        done += len(rows)
        BOARD.shard(shard, done, s.rollouts_total, committed=len(rows))
    return r
