"""Prefect tasks: thin, typed wrappers around `legival_core` stages, with retries on transient
failures. They run in the driver process (the only DuckDB writer); model work fans out to Ray
student engine actors from `tasks.engines`."""

from tasks.stages import aggregate_task, efficiency_task, ingest_teacher_task, judge_task, quality_task
from tasks.transfer import ShardResult, transfer_shard_task

__all__ = [
    "ShardResult",
    "aggregate_task",
    "efficiency_task",
    "ingest_teacher_task",
    "judge_task",
    "quality_task",
    "transfer_shard_task",
]
