"""Compute the report's tables from the store alone (no model call): ../shared/CLI.md, docs/reports.md.

`compute_report` reads the store and returns every table (pure aggregation after the reads, `assemble`);
`reports.paper` turns them into the papers' tables and `reports.render` writes the files. `legival
report`, the Prefect `report` stage and `legival serve` all call `compute_report`, so the static and
the live dashboard show the same numbers. Which metrics
exist, which are ranked and which way, which enter the correlation matrix: the registry's metric list
(`legival_core.metrics`), never a list kept here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.intervals import percentile_interval
from legival_core.metrics.base import all_metrics, metrics_from, ranked_directions
from legival_core.metrics.redundancy import SWEEP_THRESHOLDS
from legival_core.reports.compute.aggregate import (
    Aggregates,
    aggregate,
    index_traces,
    model_students,
    pair_frame,
)
from legival_core.reports.compute.bootstrap import (
    BootstrapResult,
    bootstrap,
    ci_metrics,
    ci_table,
    indistinct_columns,
    rank_pairs,
    ranked_ci_metrics,
)
from legival_core.reports.compute.columns import teacher_columns
from legival_core.reports.compute.coverage import coverage_table
from legival_core.reports.compute.data import ReportConfig, ReportData
from legival_core.reports.compute.early_answering import early_answering_table
from legival_core.reports.compute.elbow import redundancy_elbow
from legival_core.reports.compute.human import human_study_table, read_human, with_human
from legival_core.reports.compute.monitor_agreement import monitor_agreement_table
from legival_core.reports.compute.monitorability import monitorability_table, teacher_statuses
from legival_core.reports.compute.monitorability import teacher_columns as monitorability_columns
from legival_core.reports.compute.pareto import FRONTIERS, pareto_frontier
from legival_core.reports.compute.reward_watch import reward_watch
from legival_core.reports.compute.stats import (
    correlation_table,
    delta_tu,
    rank_stability,
    rank_table,
    teacher_student_metrics,
)
from legival_core.reports.compute.step_effects import step_analysis
from legival_core.reports.compute.trace_export import trace_export
from legival_core.reports.compute.trace_table import student_table, trace_table
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import report as reads
from legival_core.store import step_events as step_reads
from legival_core.transfer.step_events import CODE_VERSION as STEPS_VERSION
from legival_core.transfer.utility import TransferTable, empty_depths, transfer_table

if TYPE_CHECKING:
    import polars as pl

__all__ = ["ReportConfig", "ReportData", "assemble", "compute_report"]


def compute_report(store: Store, config: ReportConfig | None = None) -> ReportData:
    """Read the store and compute every report table (bootstrap skipped when resamples == 0)."""
    import polars as pl

    config = config or ReportConfig()
    traces = index_traces(trace_table(store, config.efficiency))
    students = student_table(store)
    # Only transfer traces (correct, m >= 1) take part; rollouts of any other trace are ignored.
    transfer_traces = traces.filter(pl.col("transfer"))
    depths = reads.rollout_depths(store, transfer_traces, students) if students.height else empty_depths()
    # the human student (docs/study.md "Analysis"): one more student, through the same code below
    human = read_human(store, transfer_traces)
    students, depths, open_ends = with_human(students, depths, human.depths)
    model_depths = depths.join(human.depths.select("tix", "k"), on=["tix", "k"], how="semi")
    tt = transfer_table(depths, config.n_bins, open_ends)
    del depths
    sweep = reads.redundancy_sweep(store, SWEEP_THRESHOLDS, config.model, SEGMENTER_VERSION)
    data = assemble(traces, students, tt, sweep, config, teacher_columns(store))
    data.human_study = human_study_table(human, model_depths, data, config)
    data.early_answering = early_answering_table(store, transfer_traces, config.n_bins, data.aggregates)
    data.monitorability = monitorability_table(store, data.teacher_metrics.select("teacher", "fotu"), config.seed)
    data.coverage = coverage_table(store, traces, data.aggregates.by_dataset, data.aggregates.by_student,
                                   teacher_statuses(data.monitorability))
    data.export = trace_export(store, data)
    data.step_events = step_reads.step_events(store, STEPS_VERSION)
    data.steps = step_analysis(data.step_events, traces, config)
    data.reward_watch = reward_watch(store, config.resamples, config.seed)
    data.monitor_agreement = monitor_agreement_table(store, config.resamples, config.seed)
    extra = monitorability_columns(data.monitorability)
    data.teacher_metrics = data.teacher_metrics.join(extra, on="teacher", how="left") if extra.height else \
        data.teacher_metrics.with_columns(pl.lit(None, pl.Float64).alias("gmean2"),
                                          pl.lit(None, pl.Float64).alias("verbalisation_rate"))
    return data


def _stage_metrics() -> list[str]:
    """The (teacher, dataset)-level metrics whose rank stability across datasets/students is reported."""
    return [m.name for m in all_metrics() if m.name in ci_metrics() and m.correlate]


def assemble(
    traces: pl.DataFrame,
    students: pl.DataFrame,
    tt: TransferTable,
    sweep: pl.DataFrame,
    config: ReportConfig | None = None,
    extra_teacher_columns: Sequence[pl.DataFrame] = (),
) -> ReportData:
    """Every report table from in-memory inputs (no store): the pure part of `compute_report`."""
    import polars as pl

    config = config or ReportConfig()
    agg = aggregate(traces, tt, students)
    teacher = agg.by_teacher
    for extra in extra_teacher_columns:
        if "teacher" not in extra.columns:
            raise ValueError("an extra teacher-level frame must have a `teacher` column")
        clash = [c for c in extra.columns if c != "teacher" and c in teacher.columns]
        if clash:
            raise ValueError(f"extra teacher columns clash with report columns: {clash}")
        teacher = teacher.join(extra, on="teacher", how="left")
    directions = ranked_directions()

    ranks = rank_table(teacher, directions)
    teacher = teacher.join(ranks, on="teacher", how="left")
    for x, y, col in FRONTIERS:
        teacher = teacher.with_columns(
            pl.Series(col, pareto_frontier(teacher[x].to_list(), teacher[y].to_list(), directions[x], directions[y]),
                      dtype=pl.Boolean)
        )

    pairs = pair_frame(traces, tt, students)
    boot: BootstrapResult | None = None
    rp = pl.DataFrame(schema={"metric": pl.Utf8, "teacher_a": pl.Utf8, "teacher_b": pl.Utf8,
                              "p_a_better": pl.Float64, "p_b_better": pl.Float64,
                              "distinguishable": pl.Boolean, "n_resamples": pl.Int64})
    if config.resamples > 0 and traces.height:
        boot = bootstrap(traces, model_students(pairs), tt.curves, config.resamples, config.seed, tt.n_bins)
        teacher = teacher.join(ci_table(boot), on="teacher", how="left")
        rp = rank_pairs(boot)
        teacher = teacher.join(indistinct_columns(rp, boot.teachers), on="teacher", how="left")
    else:
        ranked = ranked_ci_metrics()
        teacher = teacher.with_columns(
            *[pl.lit(None, pl.Float64).alias(f"{m}_ci_{s}") for m in ci_metrics() for s in ("low", "high")],
            *[pl.lit(None, pl.Float64).alias(f"rank_{m}_ci_{s}") for m in ranked for s in ("low", "high")],
            *[pl.lit(None, pl.Utf8).alias(f"rank_{m}_indistinct_from") for m in ranked],
        )

    corr_metrics = correlation_metrics(teacher)
    corr = correlation_table(teacher, corr_metrics)
    transfer_cols = [m.name for m in metrics_from("transfer") if m.correlate]
    by_ts = teacher_student_metrics(agg.by_student, transfer_cols)
    stability = pl.concat(
        [rank_stability(agg.by_dataset, "dataset", _stage_metrics()),
         rank_stability(model_students(by_ts), "student", transfer_cols)]
    )
    return ReportData(
        traces=traces, students=students, transfer=tt, aggregates=agg, teacher_metrics=teacher,
        correlations=corr, correlation_metrics=corr_metrics, rank_stability=stability,
        delta_tu=delta_tu(by_ts), rank_pairs=rp, elbow=redundancy_elbow(traces, sweep),
        tu_curves=tu_curve_table(agg, boot), boot=boot, config=config, directions=directions,
    )


def correlation_metrics(teacher: pl.DataFrame) -> list[str]:
    """The registered metrics that enter the Spearman matrix and have a numeric column, in column
    order, then the members of metric families (reward models) that were run."""
    names = [m.name for m in all_metrics() if m.correlate and not m.family and m.name in teacher.columns
             and teacher.schema[m.name].is_numeric()]
    families = [m.name for m in all_metrics() if m.family and m.correlate]
    members = [c for c in teacher.columns for f in families
               if c.startswith(f"{f}_") and c not in names and teacher.schema[c].is_numeric()]
    return names + members


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
