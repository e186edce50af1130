"""What the plan's time estimate reads: the recorded cost of transfer shards (`transfer_timings`, one row
per committed batch) and how a student's stored rollouts decoded (`legival_core.plan.calibration`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

_PER_SHARD = (
    "SELECT run_id, any_value(source) AS source, teacher, dataset, student, any_value(device) AS device, "
    "any_value(host) AS host, max(engines) AS engines, sum(chunks)::DOUBLE AS chunks, "
    "sum(rollouts)::BIGINT AS rollouts, sum(forced)::BIGINT AS forced, sum(prefill) AS prefill, "
    "sum(decode_steps) AS decode_steps, sum(decode) AS decode, "
    "sum(context) AS context, sum(compute_s) AS compute_s, sum(load_s) AS load_s, "
    "min(load_started) AS load_started, min(shard_started) AS shard_started, max(committed) AS ended, "
    "coalesce(list(load_started ORDER BY batch) FILTER (WHERE load_s > 0 AND load_started IS NOT NULL), []) "
    "AS load_starts, "
    "coalesce(list(load_s ORDER BY batch) FILTER (WHERE load_s > 0 AND load_started IS NOT NULL), []) AS load_lengths "
    "FROM transfer_timings WHERE {where} GROUP BY run_id, teacher, dataset, student "
)
"""Per (run, teacher, dataset, student): the sums of its batches' work and engine seconds, the first
model load's start, when the shard started and made its last commit (epoch seconds), and each model
load its batches reported (`load_starts`, `load_lengths`: one per engine that loaded for it)."""


def shard_timings(store: Store, model: str, backend: str, dtype: str, accelerator: str) -> pl.DataFrame:
    """The recorded shards of one engine signature, the newest first (`_PER_SHARD`'s columns); none
    in a store that predates the table, opened read-only (`Store.has_table`)."""
    if not store.has_table("transfer_timings"):
        return _no_shards()
    return store._query(
        _PER_SHARD.format(where="model = ? AND backend = ? AND dtype = ? AND accelerator = ?")
        + "ORDER BY max(committed) DESC, teacher, dataset, student",
        [model, backend, dtype, accelerator],
    )


def _no_shards() -> pl.DataFrame:
    import polars as pl

    text = ("run_id", "source", "teacher", "dataset", "student", "device", "host")
    numbers = ("engines", "chunks", "rollouts", "forced", "prefill", "decode_steps", "decode", "context", "compute_s",
               "load_s", "load_started", "shard_started", "ended")
    lists = ("load_starts", "load_lengths")
    return pl.DataFrame(schema={**dict.fromkeys(text, pl.Utf8), **dict.fromkeys(numbers, pl.Float64),
                                **dict.fromkeys(lists, pl.List(pl.Float64))})


@dataclass(frozen=True, slots=True)
class DecodeCounts:
    """How a student's stored rollouts (status ok) decoded. The first pass's tokens are not stored
    apart from the forcing pass's: a forced rollout whose first pass ran to the budget (finish
    reason `length`, the first pass's) split exactly; the others are estimated by the caller."""

    rollouts: int
    forced: int
    at_budget: int
    """First passes that ran to the budget (finish reason `length`)."""
    unforced_tokens: int
    forced_after_budget: int
    forced_after_budget_tokens: int
    """Both passes' tokens of the forced rollouts whose first pass ran to the budget."""
    forced_at_forcing_budget: int
    forced_other_tokens: int
    """Both passes' tokens of the forced rollouts whose first pass stopped before the budget."""


def decode_counts(store: Store, student_key: str, budget: int, forcing_budget: int) -> DecodeCounts:
    (row,) = store._run(
        "SELECT count(*), count(*) FILTER (WHERE forced), count(*) FILTER (WHERE finish_reason = 'length'), "
        "coalesce(sum(completion_tokens) FILTER (WHERE NOT forced), 0), "
        "count(*) FILTER (WHERE forced AND finish_reason = 'length'), "
        "coalesce(sum(completion_tokens) FILTER (WHERE forced AND finish_reason = 'length'), 0), "
        "count(*) FILTER (WHERE forced AND finish_reason = 'length' AND completion_tokens >= ?), "
        "coalesce(sum(completion_tokens) FILTER (WHERE forced AND finish_reason <> 'length'), 0) "
        "FROM rollouts WHERE student_key = ? AND status = 'ok'",
        [budget + forcing_budget, student_key],
    )
    return DecodeCounts(*(int(v or 0) for v in row))
