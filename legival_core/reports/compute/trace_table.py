"""The report's trace table and (teacher, dataset) metrics, built from the registry's metric list.

One row per trace: its grade by the current grader of its dataset, one column per per-trace metric
the registry lists (stored metrics under their current params and code version; a judged metric
takes an LLM judge's value where one is stored and records the method in `<metric>_method`), then
the derived per-trace columns (`accuracy`, `token_len_norm`, ...). A (teacher, dataset) column is
its metric's aggregate (`median`/`mean`) over the complete traces (every trace for `accuracy`):
a reasoning cut off by a token budget has an artificial length (docs/decisions.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.datasets.base import current_graders
from legival_core.metrics.base import MetricInfo, all_metrics, stored_trace_metrics
from legival_core.run_config import Efficiency
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import planner as plan_reads
from legival_core.store import report as reads
from legival_core.types import canonical_json

if TYPE_CHECKING:
    import polars as pl

COUNT_COLUMNS = ["n_correct", "n_unparsed", "n_truncated", "n_grade_timeouts"]


def trace_level_metrics() -> list[MetricInfo]:
    """The metrics whose (teacher, dataset) value aggregates a per-trace column."""
    return [m for m in all_metrics() if m.source in ("trace", "derived") and m.in_teacher_dataset]


def trace_table(store: Store, config: Efficiency) -> pl.DataFrame:
    """One row per trace with its grade and every per-trace metric (null where not computed yet)."""
    import polars as pl

    graders = current_graders(plan_reads.stored_datasets(store))
    table = reads.trace_grades(store, graders, SEGMENTER_VERSION)
    stored = stored_trace_metrics()
    keys = pl.DataFrame(
        {"metric": [m.name for m in stored], "params": [canonical_json(m.params(config)) for m in stored],
         "code_version": [m.version for m in stored]},
        schema={"metric": pl.Utf8, "params": pl.Utf8, "code_version": pl.Utf8},
    )
    values = reads.metric_values(store, keys)
    for m in stored:
        v = values.filter(pl.col("metric") == m.name).select(
            "trace_id", pl.col("value").alias(m.name), pl.col("method").alias(f"{m.name}_method"))
        v = v.unique("trace_id", keep="first")
        table = table.join(v, on="trace_id", how="left")
        if m.judged:
            table = prefer_judge(table, reads.judge_backtracking(store), m.name)
        else:
            table = table.drop(f"{m.name}_method")
    return with_derived_columns(table).sort("teacher", "dataset", "problem_id", "trace_id")


def with_derived_columns(traces: pl.DataFrame) -> pl.DataFrame:
    """Add every registered derived per-trace column (accuracy, token_len_norm, ...) to a trace table."""
    for info in all_metrics():
        if info.source == "derived" and info.derive is not None:
            traces = info.derive(traces)
    return traces


def prefer_judge(traces: pl.DataFrame, judged: pl.DataFrame, column: str) -> pl.DataFrame:
    """Replace `column`/`<column>_method` by the judge's where a judge result exists (SPEC section 3:
    every value records the method that produced it)."""
    import polars as pl

    if judged.height == 0:
        return traces
    return (
        traces.join(judged, on="trace_id", how="left")
        .with_columns(
            pl.coalesce("judge_fraction", column).alias(column),
            pl.coalesce("judge_method", f"{column}_method").alias(f"{column}_method"),
        )
        .drop("judge_fraction", "judge_method")
    )


def method_columns() -> list[str]:
    return [f"{m.name}_method" for m in stored_trace_metrics() if m.judged]


def teacher_dataset_columns() -> list[str]:
    """The trace-derived columns of teacher_dataset_metrics.csv, in order."""
    return ["teacher", "dataset", "n_traces", *[m.name for m in trace_level_metrics()], *method_columns(),
            *COUNT_COLUMNS]


def teacher_dataset_metrics(traces: pl.DataFrame) -> pl.DataFrame:
    """Aggregate a trace table to one row per (teacher, dataset), every column from the registry."""
    import polars as pl

    complete = ~pl.col("truncated")
    aggs = []
    for m in trace_level_metrics():
        col = pl.col(m.trace_column)
        if m.complete_only:
            col = col.filter(complete)
        aggs.append((col.median() if m.aggregate == "median" else col.mean()).alias(m.name))
    out = (
        traces.group_by("teacher", "dataset")
        .agg(
            pl.len().alias("n_traces"),
            *aggs,
            *[pl.col(c).drop_nulls().unique().sort().str.join("+").alias(c) for c in method_columns()],
            pl.col("correct").fill_null(False).sum().alias("n_correct"),
            (pl.col("grade_status") == "unparsed").sum().alias("n_unparsed"),
            pl.col("truncated").sum().alias("n_truncated"),
            (pl.col("grade_status") == "timeout").sum().alias("n_grade_timeouts"),
        )
        .sort("teacher", "dataset")
    )
    return out.select(teacher_dataset_columns())


def student_table(store: Store) -> pl.DataFrame:
    """(six, student_key, student): one row per student with rollouts, `student` the display name.

    The name comes from the `students` table; a name shared by several student keys (e.g. two decoding
    profiles of one model) is suffixed with the first 8 characters of the key so they stay apart."""
    import polars as pl

    s = reads.students_with_rollouts(store)
    dup = pl.col("name").count().over("name") > 1
    return s.with_columns(
        pl.when(dup).then(pl.col("name") + "@" + pl.col("student_key").str.slice(0, 8))
        .otherwise(pl.col("name")).alias("student"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("six"),
    ).select("six", "student_key", "student")
