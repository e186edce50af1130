"""The report directory: every CSV, Parquet file, figure and the dashboard of one `Report`
(../shared/CLI.md, docs/reports.md), written whole or not at all (`legival_core.outputs.replaced_whole`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.outputs import replaced_whole, write_manifest
from legival_core.reports.compute.data import ReportData, StepAnalysis
from legival_core.reports.compute.early_answering import early_answering_of
from legival_core.reports.compute.human import human_study_of
from legival_core.reports.compute.monitor_agreement import monitor_agreement_of
from legival_core.reports.compute.monitorability import monitorability_of
from legival_core.reports.compute.reward_watch import reward_watch_of
from legival_core.reports.paper.tables import PAPER_CSV, exported
from legival_core.reports.render.bundle import Report
from legival_core.reports.render.dashboard import dashboard_html
from legival_core.reports.render.early_plot import write_early_plot
from legival_core.reports.render.paper_plots import write_paper_plots
from legival_core.reports.render.plots import step_analysis_of, write_plots
from legival_core.runs.diff import diff_schema
from legival_core.safe_csv import write_csv
from legival_core.store import Store
from legival_core.store import report as reads
from legival_core.store import step_events as step_reads

if TYPE_CHECKING:
    import polars as pl

STEP_FILES = ("step_events.parquet", "step_effects.csv", "step_logistic.csv", "student_agreement.csv")
"""The step files (docs/step_events.md, "Report files"): written by every report, one schema each whatever ran."""


def write_report(report: Report, store: Store | None, out: str | Path) -> list[str]:
    """Write every file of the report directory, whole or not at all (into a new directory beside
    `out`, then swapped into place); returns their names."""
    with replaced_whole(out) as new:
        files = _write_files(report, store, new)
        write_manifest(new, files)
    return files


def _write_files(report: Report, store: Store | None, out: Path) -> list[str]:
    """Every file of the report into the (new, empty) directory `out`."""
    import polars as pl

    data = report.data
    files: list[str] = []

    def csv(frame: pl.DataFrame, name: str) -> None:
        write_csv(frame, out / name)  # every report CSV: text cells neutralised (safe_csv)
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
    if data.coverage is not None:
        csv(data.coverage, "coverage.csv")
    csv(report.changes.frame if report.changes is not None else pl.DataFrame(schema=diff_schema()), "diff.csv")
    for name in PAPER_CSV:
        csv(report.paper[name], name)
    exported(data).write_parquet(out / "traces.parquet")
    files.append("traces.parquet")
    events, steps = step_tables(data)
    events.write_parquet(out / "step_events.parquet")
    files.append("step_events.parquet")
    csv(steps.effects, "step_effects.csv")
    csv(steps.logistic, "step_logistic.csv")
    csv(steps.agreement, "student_agreement.csv")
    csv(human_study_of(data), "human_study.csv")  # one schema always (docs/study.md "Analysis")
    csv(reward_watch_of(data), "reward_watch.csv")  # one schema always (docs/reward.md)
    csv(monitorability_of(data), "monitorability.csv")  # one schema always (docs/monitorability.md)
    csv(early_answering_of(data), "early_answering.csv")  # one schema always (docs/transfer.md "Early answering")
    csv(monitor_agreement_of(data), "agreement.csv")  # one schema always (docs/agreement.md "In the report")
    if store is not None:
        reads.write_rollouts_parquet(store, data.traces, data.students, str(out / "rollouts.parquet"))
        files.append("rollouts.parquet")
    files += write_plots(data, out)
    files += write_early_plot(data, out)
    files += write_paper_plots(report, out)
    (out / "index.html").write_text(dashboard_html(report, store, data.config.dashboard_traces, image_dir=out),
                                    encoding="utf-8")
    files.append("index.html")
    return files


def step_tables(data: ReportData) -> tuple[pl.DataFrame, StepAnalysis]:
    """step_events.parquet (the stored events of the current version with their trace's teacher,
    dataset and problem_id; the same columns when none is stored) and the step analysis (`data.steps`,
    or its not-run rows for tables assembled without a store)."""

    events = data.step_events if data.step_events is not None else step_reads.empty_step_events()
    steps = step_analysis_of(data)
    where = data.traces.select("trace_id", "teacher", "dataset", "problem_id").unique("trace_id")
    frame = where.join(events, on="trace_id", how="right").select(
        "teacher", "dataset", "problem_id", *[c for c in events.columns])
    return frame.sort("teacher", "dataset", "trace_id", "student", "k_start", nulls_last=True), steps
