"""The three aggregation levels of SPEC sections 4-5 as pure functions over polars frames.

(teacher, dataset, student) -> (teacher, dataset) = mean over students -> teacher = unweighted mean
over datasets; a level's mean skips undefined (null) values, as `transfer.metrics.mean_of_defined`
does. Efficiency metrics and accuracy come from the trace table (`tables.teacher_dataset_metrics`);
transfer metrics from a `TransferTable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from legival_core.reports.tables import TEACHER_DATASET_COLUMNS, teacher_dataset_metrics, with_token_len_norm
from legival_core.reports.transfer_tables import (
    PAIR_COUNT_COLUMNS,
    TransferTable,
    group_curves,
    sotu_from_taus,
)

if TYPE_CHECKING:
    import polars as pl

Direction = Literal["higher", "lower"]

# Teacher-level metrics that get a rank, and which way is better (SPEC section 5).
RANKED_METRICS: dict[str, Direction] = {
    "accuracy": "higher",
    "token_len_median": "lower",
    "token_len_mean": "lower",
    "token_len_norm": "lower",
    "step_len_median": "lower",
    "redundancy": "lower",
    "backtracking": "lower",
    "fotu": "higher",
    "sotu": "higher",
    "regression_rate": "lower",
}
TRANSFER_METRICS = ("fotu", "sotu", "regression_rate", "rr_count", "student_baseline_acc")
STUDENT_COUNT_COLUMNS = ("n_sotu", "n_curve_traces", "n_rollout_traces", *PAIR_COUNT_COLUMNS)
# Every teacher-level metric that gets a bootstrap confidence interval.
CI_METRICS = (*RANKED_METRICS, "student_baseline_acc")

TEACHER_DATASET_REPORT_COLUMNS = [
    *TEACHER_DATASET_COLUMNS[:9], "fotu", "sotu", "regression_rate", "n_transfer_traces",
    "student_baseline_acc", *TEACHER_DATASET_COLUMNS[9:], "rr_count", "n_correct_no_steps",
    "n_students", *STUDENT_COUNT_COLUMNS,
]


@dataclass(frozen=True, slots=True)
class Aggregates:
    """All three levels and the mean curves (long frames: group keys, `bin`, `f`)."""

    by_student: pl.DataFrame
    by_dataset: pl.DataFrame
    by_teacher: pl.DataFrame
    curves_by_student: pl.DataFrame
    curves_by_dataset: pl.DataFrame
    curves_by_teacher: pl.DataFrame


def index_traces(traces: pl.DataFrame) -> pl.DataFrame:
    """Add `tix` (row number), `token_len_norm` and `transfer` (correct and m >= 1, SPEC section 4)."""
    import polars as pl

    t = traces if "token_len_norm" in traces.columns else with_token_len_norm(traces)
    return t.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("tix"),
        (pl.col("correct").fill_null(False) & (pl.col("step_len") >= 1).fill_null(False)).alias("transfer"),
    )


def _empty_by_student() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(
        schema={"teacher": pl.Utf8, "dataset": pl.Utf8, "student": pl.Utf8,
                **{c: pl.Float64 for c in TRANSFER_METRICS}, **{c: pl.Int64 for c in STUDENT_COUNT_COLUMNS}}
    )


def _empty_curves(keys: list[str]) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(schema={**{k: pl.Utf8 for k in keys}, "bin": pl.Int64, "f": pl.Float64, "n": pl.Int64})


def pair_frame(traces: pl.DataFrame, tt: TransferTable, students: pl.DataFrame) -> pl.DataFrame:
    """`tt.pairs` with teacher, dataset, problem_id, student and `_r` (the row of `tt.curves`)."""
    import polars as pl

    return (
        tt.pairs.with_row_index("_r")
        .join(traces.select("tix", "teacher", "dataset", "problem_id"), on="tix", how="inner")
        .join(students.select("six", "student"), on="six", how="inner")
        .with_columns(pl.col("_r").cast(pl.Int64))
        .sort("_r")
    )


def by_student(pairs: pl.DataFrame, tt: TransferTable) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(teacher, dataset, student): FOTU, RR, raw RR count and baseline = means over traces with a
    value; SOTU from the traces' first successes; the mean curve f(b) (SPEC section 4)."""
    import numpy as np
    import polars as pl

    keys = ["teacher", "dataset", "student"]
    if pairs.height == 0:
        return _empty_by_student(), _empty_curves(keys)
    agg = (
        pairs.group_by(keys)
        .agg(
            pl.col("fotu").mean(),
            pl.col("rr").mean().alias("regression_rate"),
            pl.col("rr_count").cast(pl.Float64).mean().alias("rr_count"),
            pl.col("y0").mean().alias("student_baseline_acc"),
            pl.col("has_curve").sum().cast(pl.Int64).alias("n_curve_traces"),
            pl.len().cast(pl.Int64).alias("n_rollout_traces"),
            *[pl.col(c).sum().cast(pl.Int64) for c in PAIR_COUNT_COLUMNS],
        )
        .join(sotu_from_taus(pairs, keys, tt.n_bins), on=keys, how="left")
        .sort(keys)
        .with_row_index("_g")
    )
    gi = pairs.join(agg.select(*keys, "_g"), on=keys, how="left").sort("_r")["_g"].to_numpy().astype(np.int64)
    means, n = group_curves(tt.curves[pairs["_r"].to_numpy()], gi, agg.height)
    have = np.flatnonzero(n > 0)
    curves = pl.DataFrame(
        {
            **{k: np.repeat(agg[k].to_numpy()[have], tt.n_bins) for k in keys},
            "bin": np.tile(np.arange(1, tt.n_bins + 1), len(have)),
            "f": means[have].ravel(),
            "n": np.repeat(n[have], tt.n_bins),
        },
        schema={**{k: pl.Utf8 for k in keys}, "bin": pl.Int64, "f": pl.Float64, "n": pl.Int64},
    )
    out = agg.drop("_g").select(*keys, *TRANSFER_METRICS, *STUDENT_COUNT_COLUMNS)
    return out, curves


def by_dataset(traces: pl.DataFrame, students: pl.DataFrame, student_curves: pl.DataFrame) -> tuple[
    pl.DataFrame, pl.DataFrame
]:
    """(teacher, dataset): efficiency metrics and accuracy from the traces, transfer metrics = mean over
    students (undefined values skipped), counts summed over students, curve = mean over students."""
    import polars as pl

    eff = teacher_dataset_metrics(traces)
    counts = traces.group_by("teacher", "dataset").agg(
        pl.when(pl.col("step_len").is_not_null().any()).then(pl.col("transfer").sum()).otherwise(None)
        .cast(pl.Int64).alias("n_transfer_traces"),
        (pl.col("correct").fill_null(False) & (pl.col("step_len") == 0).fill_null(False)).sum()
        .cast(pl.Int64).alias("n_correct_no_steps"),
    )
    tr = students.group_by("teacher", "dataset").agg(
        *[pl.col(c).mean() for c in TRANSFER_METRICS],
        pl.col("student").n_unique().cast(pl.Int64).alias("n_students"),
        *[pl.col(c).sum().cast(pl.Int64) for c in STUDENT_COUNT_COLUMNS],
    )
    td = (
        eff.join(counts, on=["teacher", "dataset"], how="left")
        .join(tr, on=["teacher", "dataset"], how="left")
        .with_columns(pl.col("n_students").fill_null(0), *[pl.col(c).fill_null(0) for c in STUDENT_COUNT_COLUMNS])
        .sort("teacher", "dataset")
        .select(TEACHER_DATASET_REPORT_COLUMNS)
    )
    curves = (
        student_curves.group_by("teacher", "dataset", "bin")
        .agg(pl.col("f").mean(), pl.len().cast(pl.Int64).alias("n"))
        .sort("teacher", "dataset", "bin")
    )
    return td, curves


def by_teacher(td: pl.DataFrame, dataset_curves: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """teacher: every metric = unweighted mean over datasets of the (teacher, dataset) values (null
    skipped), counts summed; mu_T(b) = the same mean of the dataset curves (SPEC section 4)."""
    import polars as pl

    metrics = [c for c in (*RANKED_METRICS, "student_baseline_acc", "rr_count") if c in td.columns]
    count_cols = [c for c in td.columns if c.startswith("n_") and c != "n_students"]
    t = (
        td.group_by("teacher")
        .agg(
            pl.len().cast(pl.Int64).alias("n_datasets"),
            *[pl.col(c).mean() for c in metrics],
            *[pl.col(c).sum().cast(pl.Int64) for c in count_cols],
            pl.col("backtracking_method").drop_nulls().str.split("+").explode().unique().sort().str.join("+"),
            pl.col("n_students").max(),
        )
        .sort("teacher")
    )
    t = t.with_columns(
        pl.when(pl.col("backtracking_method") == "").then(None).otherwise(pl.col("backtracking_method"))
        .alias("backtracking_method")
    )
    curves = (
        dataset_curves.group_by("teacher", "bin")
        .agg(pl.col("f").mean(), pl.len().cast(pl.Int64).alias("n"))
        .sort("teacher", "bin")
    )
    return t.select("teacher", "n_datasets", *metrics, "backtracking_method", "n_students", *count_cols), curves


def aggregate(traces: pl.DataFrame, tt: TransferTable, students: pl.DataFrame) -> Aggregates:
    """All levels from an indexed trace table (`index_traces`), a transfer table and the students."""
    pairs = pair_frame(traces, tt, students)
    s, s_curves = by_student(pairs, tt)
    d, d_curves = by_dataset(traces, s, s_curves)
    t, t_curves = by_teacher(d, d_curves)
    return Aggregates(s, d, t, s_curves, d_curves, t_curves)
