"""Transfer's shards outside a flow (tests, benchmarks): `run_shard` is what a run's shard task does.

The shards run as any shard stage (`tasks.stages.run_shards`): the driver plans what is missing
(DuckDB, under the driver lock), the Ray engine pool runs the stage's `Work`, and each batch of
finished chunks is committed in one transaction as it arrives, so `kill -9` loses at most the
chunks in flight and a rerun plans only what was not committed. It is the same `TransferStage` that
`legival transfer` runs in-process, chunked per shard by `legival_core.stages.transfer_shards.ShardStage`.
"""

from __future__ import annotations

from legival_core.run_config import Execution
from legival_core.stages.transfer_shards import ShardResult, ShardStage, shard_job
from legival_core.transfer.rollout_plan import StudentConfig
from tasks.stages import run_shard_job

__all__ = ["ShardResult", "ShardStage", "run_shard"]


def run_shard(db: str, config: StudentConfig, teacher: str, dataset: str, limit: int | None,
              execution: Execution) -> ShardResult:
    """One (teacher, dataset, student) shard on the Ray engine pool of `execution`."""
    result: ShardResult = run_shard_job(db, shard_job(config, teacher, dataset, limit, execution.traces_per_chunk),
                                        execution)
    return result
