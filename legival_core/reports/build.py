"""Write the report directory from the store alone (no model call): ../shared/CLI.md, docs/reports.md.

`compute_report` reads the store and returns every table (pure aggregation after the reads);
`write_report` writes the files. Later stages add teacher-level columns without editing this module:
pass frames keyed by `teacher` as `extra_teacher_columns` (e.g. `rm_<name>`, `monitor_f1`, the
text-quality dimensions); they are joined into `teacher_metrics.csv`, take part in the Spearman
matrix, and are ranked when `extra_directions` names their better direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.embed import DEFAULT_MODEL
from legival_core.metrics.efficiency import DEFAULT_TAU, SWEEP_THRESHOLDS
from legival_core.reports.aggregate import (
    CI_METRICS,
    RANKED_METRICS,
    Aggregates,
    Direction,
    aggregate,
    index_traces,
    pair_frame,
)
from legival_core.reports.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    BootstrapResult,
    bootstrap,
    ci_table,
    indistinct_columns,
    percentile_interval,
    rank_pairs,
)
from legival_core.reports.elbow import redundancy_elbow
from legival_core.reports.pareto import FRONTIERS, pareto_frontier
from legival_core.reports.stats import (
    correlation_table,
    delta_tu,
    rank_stability,
    rank_table,
    teacher_student_metrics,
)
from legival_core.reports.tables import (
    redundancy_sweep_table,
    rollout_depths,
    student_table,
    trace_table,
    write_rollouts_parquet,
)
from legival_core.reports.transfer_tables import TransferTable, empty_depths, transfer_table
from legival_core.store import Store
from legival_core.transfer.metrics import N_BINS

if TYPE_CHECKING:
    import polars as pl

STABILITY_METRICS = (*RANKED_METRICS, "student_baseline_acc")
STUDENT_STABILITY_METRICS = ("fotu", "sotu", "regression_rate", "student_baseline_acc")


@dataclass(slots=True)
class ReportData:
    """Every table of the report, before anything is written."""

    traces: pl.DataFrame
    students: pl.DataFrame
    transfer: TransferTable
    aggregates: Aggregates
    teacher_metrics: pl.DataFrame
    correlations: pl.DataFrame
    correlation_metrics: list[str]
    rank_stability: pl.DataFrame
    delta_tu: pl.DataFrame
    rank_pairs: pl.DataFrame
    elbow: pl.DataFrame
    tu_curves: pl.DataFrame
    boot: BootstrapResult | None
    tau: float
    model: str
    directions: dict[str, Direction] = field(default_factory=dict)

    @property
    def teacher_dataset(self) -> pl.DataFrame:
        return self.aggregates.by_dataset


@dataclass(slots=True)
class ReportResult:
    teacher_dataset: pl.DataFrame
    files: list[str] = field(default_factory=list)
    data: ReportData | None = None


def compute_report(
    store: Store,
    tau: float = DEFAULT_TAU,
    model: str = DEFAULT_MODEL,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    extra_teacher_columns: Sequence[pl.DataFrame] = (),
    extra_directions: Mapping[str, Direction] | None = None,
    n_bins: int = N_BINS,
) -> ReportData:
    """Read the store and compute every report table (bootstrap skipped when n_resamples == 0)."""
    traces = index_traces(trace_table(store, tau=tau, model=model))
    students = student_table(store)
    import polars as pl

    # Only transfer traces (correct, m >= 1) take part; rollouts of any other trace are ignored.
    transfer_traces = traces.filter(pl.col("transfer"))
    depths = rollout_depths(store, transfer_traces, students) if students.height else empty_depths()
    tt = transfer_table(depths, n_bins)
    del depths
    sweep = redundancy_sweep_table(store, list(SWEEP_THRESHOLDS), model)
    return assemble(traces, students, tt, sweep, tau, model, n_resamples, seed, extra_teacher_columns,
                    extra_directions)


def assemble(
    traces: pl.DataFrame,
    students: pl.DataFrame,
    tt: TransferTable,
    sweep: pl.DataFrame,
    tau: float = DEFAULT_TAU,
    model: str = DEFAULT_MODEL,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    extra_teacher_columns: Sequence[pl.DataFrame] = (),
    extra_directions: Mapping[str, Direction] | None = None,
) -> ReportData:
    """Every report table from in-memory inputs (no store): the pure part of `compute_report`."""
    import polars as pl

    agg = aggregate(traces, tt, students)
    teacher = agg.by_teacher
    extra_cols: list[str] = []
    for extra in extra_teacher_columns:
        if "teacher" not in extra.columns:
            raise ValueError("an extra teacher-level frame must have a `teacher` column")
        clash = [c for c in extra.columns if c != "teacher" and c in teacher.columns]
        if clash:
            raise ValueError(f"extra teacher columns clash with report columns: {clash}")
        teacher = teacher.join(extra, on="teacher", how="left")
        extra_cols += [c for c in extra.columns if c != "teacher"]
    directions: dict[str, Direction] = {**RANKED_METRICS, **(extra_directions or {})}

    ranks = rank_table(teacher, directions)
    teacher = teacher.join(ranks, on="teacher", how="left")
    for x, x_dir, y, y_dir, col in FRONTIERS:
        teacher = teacher.with_columns(
            pl.Series(col, pareto_frontier(teacher[x].to_list(), teacher[y].to_list(), x_dir, y_dir), dtype=pl.Boolean)
        )

    pairs = pair_frame(traces, tt, students)
    boot: BootstrapResult | None = None
    rp = pl.DataFrame(schema={"metric": pl.Utf8, "teacher_a": pl.Utf8, "teacher_b": pl.Utf8,
                              "p_a_better": pl.Float64, "p_b_better": pl.Float64,
                              "distinguishable": pl.Boolean, "n_resamples": pl.Int64})
    if n_resamples > 0 and traces.height:
        boot = bootstrap(traces, pairs, tt.curves, n_resamples, seed, tt.n_bins)
        teacher = teacher.join(ci_table(boot), on="teacher", how="left")
        rp = rank_pairs(boot)
        teacher = teacher.join(indistinct_columns(rp, boot.teachers), on="teacher", how="left")
    else:
        teacher = teacher.with_columns(
            *[pl.lit(None, pl.Float64).alias(f"{m}_ci_{s}") for m in CI_METRICS for s in ("low", "high")],
            *[pl.lit(None, pl.Float64).alias(f"rank_{m}_ci_{s}") for m in RANKED_METRICS for s in ("low", "high")],
            *[pl.lit(None, pl.Utf8).alias(f"rank_{m}_indistinct_from") for m in RANKED_METRICS],
        )

    numeric_extra = [c for c in extra_cols if teacher.schema[c].is_numeric()]
    corr_metrics = [*RANKED_METRICS, "student_baseline_acc", *numeric_extra]
    corr = correlation_table(teacher, corr_metrics)
    by_ts = teacher_student_metrics(agg.by_student, STUDENT_STABILITY_METRICS)
    stability = pl.concat(
        [rank_stability(agg.by_dataset, "dataset", STABILITY_METRICS),
         rank_stability(by_ts, "student", STUDENT_STABILITY_METRICS)]
    )
    return ReportData(
        traces=traces, students=students, transfer=tt, aggregates=agg, teacher_metrics=teacher,
        correlations=corr, correlation_metrics=corr_metrics, rank_stability=stability,
        delta_tu=delta_tu(by_ts), rank_pairs=rp, elbow=redundancy_elbow(traces, sweep),
        tu_curves=tu_curve_table(agg, boot), boot=boot, tau=tau, model=model, directions=directions,
    )


def tu_curve_table(agg: Aggregates, boot: BootstrapResult | None) -> pl.DataFrame:
    """mu_T(b) per teacher with its bootstrap percentile band (null without a bootstrap)."""
    import numpy as np
    import polars as pl

    c = agg.curves_by_teacher.select("teacher", "bin", pl.col("f").alias("mu"), "n")
    if boot is None or not boot.teachers:
        return c.with_columns(pl.lit(None, pl.Float64).alias("ci_low"), pl.lit(None, pl.Float64).alias("ci_high"))
    n_t, n_b = boot.curves.shape[1], boot.curves.shape[2]
    lo, hi = percentile_interval(boot.curves.reshape(boot.curves.shape[0], n_t * n_b))
    band = pl.DataFrame({
        "teacher": np.repeat(np.array(boot.teachers, dtype=object), n_b).tolist(),
        "bin": np.tile(np.arange(1, n_b + 1), n_t),
        "ci_low": lo, "ci_high": hi,
    }).fill_nan(None)
    return c.join(band, on=["teacher", "bin"], how="left").sort("teacher", "bin")


def write_report(data: ReportData, store: Store | None, out: str | Path, dashboard_traces: int = 10) -> list[str]:
    """Write every file of the report directory; returns their names."""
    from legival_core.reports.dashboard import dashboard_html
    from legival_core.reports.plots import write_plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []

    def csv(frame: pl.DataFrame, name: str) -> None:
        frame.write_csv(out / name)
        files.append(name)

    csv(data.aggregates.by_dataset, "teacher_dataset_metrics.csv")
    csv(data.aggregates.by_student, "teacher_dataset_student_metrics.csv")
    csv(data.teacher_metrics, "teacher_metrics.csv")
    csv(data.correlations, "correlations.csv")
    csv(data.rank_stability, "rank_stability.csv")
    csv(data.delta_tu, "delta_tu.csv")
    csv(data.rank_pairs, "rank_pairs.csv")
    csv(data.elbow, "redundancy_elbow.csv")
    csv(data.tu_curves, "tu_curves.csv")
    data.traces.drop("tix").write_parquet(out / "traces.parquet")
    files.append("traces.parquet")
    if store is not None:
        write_rollouts_parquet(store, data.traces, data.students, str(out / "rollouts.parquet"))
        files.append("rollouts.parquet")
    files += write_plots(data, out)
    (out / "index.html").write_text(dashboard_html(data, store, dashboard_traces, image_dir=out), encoding="utf-8")
    files.append("index.html")
    return files


def build_reports(
    store: Store,
    out: str | Path,
    tau: float = DEFAULT_TAU,
    model: str = DEFAULT_MODEL,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    extra_teacher_columns: Sequence[pl.DataFrame] = (),
    extra_directions: Mapping[str, Direction] | None = None,
    dashboard_traces: int = 10,
) -> ReportResult:
    """`legival report`: compute everything from the store and write the report directory."""
    data = compute_report(store, tau, model, n_resamples, seed, extra_teacher_columns, extra_directions)
    files = write_report(data, store, out, dashboard_traces)
    return ReportResult(teacher_dataset=data.teacher_dataset, files=files, data=data)
