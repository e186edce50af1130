"""The redundancy threshold elbow (SPEC section 3: the 21-value sweep of tau)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.metrics.redundancy import SWEEP_THRESHOLDS
from legival_core.reports.compute.stats import rank_values

if TYPE_CHECKING:
    import polars as pl


def redundancy_elbow(
    traces: pl.DataFrame, sweep: pl.DataFrame, thresholds: tuple[float, ...] = SWEEP_THRESHOLDS
) -> pl.DataFrame:
    """Per teacher and threshold: mean redundant fraction and its rank (1 = least redundant).

    `sweep` holds, per trace with stored r_i, columns `thr_<i>` = #{r_i > threshold_i} / (m - 1).
    Like the headline redundancy, truncated traces are left out; a trace with m < 2 counts as 0; a trace
    whose similarities are not stored is left out. Means are taken per (teacher, dataset) and then
    averaged over datasets, as every teacher-level metric is.
    """
    import numpy as np
    import polars as pl

    thr_cols = [f"thr_{i}" for i in range(len(thresholds))]
    t = traces.filter(~pl.col("truncated") & pl.col("step_len").is_not_null()).select(
        "trace_id", "teacher", "dataset", "step_len"
    )
    t = t.join(sweep.select("trace_id", *thr_cols), on="trace_id", how="left").with_columns(
        pl.when(pl.col("step_len") < 2).then(0.0).otherwise(pl.col(c)).alias(c) for c in thr_cols
    )
    per_teacher = (
        t.group_by("teacher", "dataset").agg(pl.col(c).mean() for c in thr_cols)
        .group_by("teacher").agg(pl.col(c).mean() for c in thr_cols)
        .sort("teacher")
    )
    teachers = per_teacher["teacher"].to_list()
    values = per_teacher.select(thr_cols).to_numpy().astype(np.float64) if teachers else np.zeros((0, len(thr_cols)))
    rows = []
    for j, thr in enumerate(thresholds):
        col = values[:, j] if len(teachers) else np.zeros(0)
        ranks = rank_values(col, "lower")
        for i, teacher in enumerate(teachers):
            v = col[i]
            rows.append((teacher, float(thr), None if np.isnan(v) else float(v),
                         None if np.isnan(ranks[i]) else int(ranks[i])))
    return pl.DataFrame(
        rows, orient="row",
        schema={"teacher": pl.Utf8, "threshold": pl.Float64, "redundancy": pl.Float64, "rank": pl.Int64},
    )
