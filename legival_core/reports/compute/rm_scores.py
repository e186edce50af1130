"""Reward-model scores per trace and their teacher-level means (the `rm_*` columns of
teacher_metrics.csv); the correlations with transfer utility are a paper table (`paper.rewards`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.metrics.base import metrics_from
from legival_core.rewards.models import RM_CODE_VERSION
from legival_core.store import Store
from legival_core.store import report as reads

if TYPE_CHECKING:
    import polars as pl


def rm_scores(store: Store) -> pl.DataFrame:
    """trace_id x one column per RM metric (status 'ok' rows of the current code version)."""
    import polars as pl

    long = reads.rm_rows(store, RM_CODE_VERSION)
    if long.height == 0:
        return pl.DataFrame(schema={"trace_id": pl.Utf8})
    return long.pivot(on="metric", index="trace_id", values="value", aggregate_function="mean")


def column_name(metric: str) -> str:
    """`rm:skywork-v2:min` -> `rm_skywork-v2_min` (the teacher_metrics.csv column)."""
    return "rm_" + metric.removeprefix("rm:").replace(":", "_")


def teacher_columns(store: Store) -> pl.DataFrame:
    """One row per teacher: the mean of every RM metric over its traces. Every registered RM column
    is present (empty where `legival rm` did not run); an unregistered RM adds its own columns."""
    import polars as pl

    scores = rm_scores(store)
    teachers = reads.trace_teachers(store)
    metrics = [c for c in scores.columns if c != "trace_id"]
    base = teachers.select("teacher").unique().sort("teacher")
    if metrics:
        means = (teachers.join(scores, on="trace_id", how="inner").group_by("teacher")
                 .agg(pl.col(m).mean().alias(column_name(m)) for m in metrics))
        base = base.join(means, on="teacher", how="left")
    registered = [m.name for m in metrics_from("rewards") if not m.family]
    missing = [c for c in registered if c not in base.columns]
    base = base.with_columns(pl.lit(None, pl.Float64).alias(c) for c in missing)
    extra = [c for c in base.columns if c not in ("teacher", *registered)]
    return base.select("teacher", *registered, *extra).sort("teacher")
