"""The three aggregation levels of SPEC sections 4-5 as pure functions over polars frames.

(teacher, dataset, student) -> (teacher, dataset) = mean over students -> teacher = unweighted mean
over datasets; a level's mean skips undefined (null) values. Trace-level metrics and accuracy come
from the trace table (`tables.teacher_dataset_metrics`); transfer metrics from a `TransferTable`.
Which columns exist, and which way each is better, is the registry's metric list (`metrics.base`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.metrics.base import Direction, metrics_from
from legival_core.reports.compute.trace_table import COUNT_COLUMNS, method_columns, teacher_dataset_metrics
from legival_core.transfer.utility import PAIR_COUNT_COLUMNS, TransferTable, group_curves, sotu_from_taus

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Aggregates", "Direction", "aggregate", "index_traces", "pair_frame"]

HUMAN = "human"
"""The human studies' student (docs/study.md "Analysis"): a row of its own in every per-student table,
kept out of the (teacher, dataset) and teacher means over students and their intervals, which stay the
model students' (a study answers a few problems at a few depths: adding one must not move the
leaderboard); the human study's table sets it beside them."""

TRANSFER_COLUMNS = ("fotu", "sotu", "regression_rate", "rr_count", "student_baseline_acc")
"""What `by_student` computes; every registered transfer metric must be one of these (tested)."""
STUDENT_COUNT_COLUMNS = ("n_sotu", "n_curve_traces", "n_rollout_traces", *PAIR_COUNT_COLUMNS)


def transfer_metrics() -> tuple[str, ...]:
    """The registered transfer columns, in column order."""
    return tuple(m.name for m in metrics_from("transfer"))


N_TRANSFER_TRACES_ORDER = 230
"""`n_transfer_traces` sits after the regression rate (../shared/CLI.md pins the first columns)."""


def teacher_dataset_report_columns() -> list[str]:
    """teacher_dataset_metrics.csv: keys, then every (teacher, dataset) metric in registry order (a
    judged metric's `<name>_method` right after it, `n_transfer_traces` after the regression rate),
    then the counts."""
    placed: list[tuple[float, str]] = [(N_TRANSFER_TRACES_ORDER, "n_transfer_traces")]
    for m in metrics_from("trace", "derived", "transfer"):
        if not m.in_teacher_dataset:
            continue
        placed.append((m.order, m.name))
        if f"{m.name}_method" in method_columns():
            placed.append((m.order + 0.5, f"{m.name}_method"))
    return ["teacher", "dataset", "n_traces", *[n for _o, n in sorted(placed)], *COUNT_COLUMNS,
            "n_correct_no_steps", "n_students", *STUDENT_COUNT_COLUMNS]


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
    """Add `tix` (row number) and `transfer` (correct and m >= 1 steps, SPEC section 4: the transfer
    traces; `m` comes from the segmentation the transfer stage requires, so transfer metrics need no
    efficiency run)."""
    import polars as pl

    return traces.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("tix"),
        (pl.col("correct").fill_null(False) & (pl.col("m") >= 1).fill_null(False)).alias("transfer"),
    )


def _empty_by_student() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(
        schema={"teacher": pl.Utf8, "dataset": pl.Utf8, "student": pl.Utf8,
                **{c: pl.Float64 for c in transfer_metrics()}, **{c: pl.Int64 for c in STUDENT_COUNT_COLUMNS}}
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
    out = agg.drop("_g").select(*keys, *transfer_metrics(), *STUDENT_COUNT_COLUMNS)
    return out, curves


def by_dataset(traces: pl.DataFrame, students: pl.DataFrame, student_curves: pl.DataFrame) -> tuple[
    pl.DataFrame, pl.DataFrame
]:
    """(teacher, dataset): efficiency metrics and accuracy from the traces, transfer metrics = mean over
    students (undefined values skipped), counts summed over students, curve = mean over students."""
    import polars as pl

    eff = teacher_dataset_metrics(traces)
    counts = traces.group_by("teacher", "dataset").agg(
        pl.when(pl.col("m").is_not_null().any()).then(pl.col("transfer").sum()).otherwise(None)
        .cast(pl.Int64).alias("n_transfer_traces"),
        (pl.col("correct").fill_null(False) & (pl.col("m") == 0).fill_null(False)).sum()
        .cast(pl.Int64).alias("n_correct_no_steps"),
    )
    tr = students.group_by("teacher", "dataset").agg(
        *[pl.col(c).mean() for c in transfer_metrics()],
        pl.col("student").n_unique().cast(pl.Int64).alias("n_students"),
        *[pl.col(c).sum().cast(pl.Int64) for c in STUDENT_COUNT_COLUMNS],
    )
    td = (
        eff.join(counts, on=["teacher", "dataset"], how="left")
        .join(tr, on=["teacher", "dataset"], how="left")
        .with_columns(pl.col("n_students").fill_null(0), *[pl.col(c).fill_null(0) for c in STUDENT_COUNT_COLUMNS])
        .sort("teacher", "dataset")
        .select(teacher_dataset_report_columns())
    )
    curves = (  # n: the trace curves (trace x student) behind the bin, over the students
        student_curves.group_by("teacher", "dataset", "bin")
        .agg(pl.col("f").mean(), pl.col("n").sum().cast(pl.Int64))
        .sort("teacher", "dataset", "bin")
    )
    return td, curves


def by_teacher(td: pl.DataFrame, dataset_curves: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """teacher: every metric = unweighted mean over datasets of the (teacher, dataset) values (null
    skipped), counts summed; mu_T(b) = the same mean of the dataset curves (SPEC section 4)."""
    import polars as pl

    metrics = [m.name for m in metrics_from("trace", "derived", "transfer") if m.name in td.columns]
    methods = [c for c in td.columns if c.endswith("_method")]
    count_cols = [c for c in td.columns if c.startswith("n_") and c != "n_students"]
    t = (
        td.group_by("teacher")
        .agg(
            pl.len().cast(pl.Int64).alias("n_datasets"),
            *[pl.col(c).mean() for c in metrics],
            *[pl.col(c).sum().cast(pl.Int64) for c in count_cols],
            *[pl.col(c).drop_nulls().str.split("+").explode().unique().sort().str.join("+") for c in methods],
            pl.col("n_students").max(),
        )
        .sort("teacher")
    )
    t = t.with_columns(pl.when(pl.col(c) == "").then(None).otherwise(pl.col(c)).alias(c) for c in methods)
    curves = (  # n: the trace curves behind the bin, over the datasets (not the number of datasets)
        dataset_curves.group_by("teacher", "bin")
        .agg(pl.col("f").mean(), pl.col("n").sum().cast(pl.Int64))
        .sort("teacher", "bin")
    )
    return t.select("teacher", "n_datasets", *metrics, *methods, "n_students", *count_cols), curves


def aggregate(traces: pl.DataFrame, tt: TransferTable, students: pl.DataFrame) -> Aggregates:
    """All levels from an indexed trace table (`index_traces`), a transfer table and the students."""
    pairs = pair_frame(traces, tt, students)
    s, s_curves = by_student(pairs, tt)
    d, d_curves = by_dataset(traces, model_students(s), model_students(s_curves))
    t, t_curves = by_teacher(d, d_curves)
    return Aggregates(s, d, t, s_curves, d_curves, t_curves)


def model_students(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of the model students: `frame` without the human studies' (`HUMAN`)."""
    import polars as pl

    return frame.filter(pl.col("student") != HUMAN) if frame.height else frame
