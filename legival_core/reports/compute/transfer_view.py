"""Trace-level and teacher-level transfer utility read from the store with the report's own code
(`legival_core.reports`), so RM and monitorability correlations use exactly the reported numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.reports.compute.aggregate import aggregate, index_traces, pair_frame
from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.compute.trace_table import student_table, trace_table
from legival_core.store import Store
from legival_core.store import report as reads
from legival_core.transfer.utility import empty_depths, transfer_table

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True, slots=True)
class TransferView:
    traces: pl.DataFrame  # trace_table + tix + per-trace `fotu`, `rr` (means over students)
    by_dataset: pl.DataFrame  # (teacher, dataset): accuracy, token_len_median, fotu, sotu, regression_rate
    by_teacher: pl.DataFrame


def transfer_view(store: Store, traces_filter: pl.Expr | None = None,
                  config: ReportConfig | None = None) -> TransferView:
    import polars as pl

    config = config or ReportConfig()
    traces = index_traces(trace_table(store, config.efficiency))
    if traces_filter is not None:
        traces = traces.filter(traces_filter)
    students = student_table(store)
    depths = reads.rollout_depths(store, traces, students) if students.height else empty_depths()
    tt = transfer_table(depths, config.n_bins)
    agg = aggregate(traces, tt, students)
    pairs = pair_frame(traces, tt, students)
    per_trace = pairs.group_by("tix").agg(pl.col("fotu").mean(), pl.col("rr").mean())
    traces = traces.join(per_trace, on="tix", how="left")
    return TransferView(traces, agg.by_dataset, agg.by_teacher)


def all_solved(traces: pl.DataFrame) -> pl.DataFrame:
    """(dataset, problem_id) that every teacher with traces on the dataset answered correctly."""
    import polars as pl

    n_teachers = traces.group_by("dataset").agg(pl.col("teacher").n_unique().alias("_n"))
    solved = (traces.filter(pl.col("correct").fill_null(False)).group_by("dataset", "problem_id")
              .agg(pl.col("teacher").n_unique().alias("_k")))
    return (solved.join(n_teachers, on="dataset").filter(pl.col("_k") == pl.col("_n"))
            .select("dataset", "problem_id"))
