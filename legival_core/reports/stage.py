"""The report as a stage: plan = read the store and compute every table, commit = record the run
(a benchmark run), compare it with the previous one, and write the files.

`legival report` and the Prefect `report` task both run it through `run_stage`. The rooms it joins:
`reports.compute` (tables from the store), `runs` (run records and their diff), `reports.paper`
(the papers' tables from the computed ones) and `reports.render` (files, figures, dashboard)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.reports.compute.build import compute_report
from legival_core.reports.compute.data import ReportConfig, ReportData
from legival_core.reports.render.bundle import Report, bundle
from legival_core.reports.render.files import write_report
from legival_core.runs.diff import changes
from legival_core.runs.record import RecordedRun, RunInfo, record_run
from legival_core.stages.base import Executor, Plan, register_stage, run_stage
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl

NEEDS = ("grade", "efficiency", "transfer", "judge", "quality", "rewards", "monitor")
register_stage("report", "legival report --db DB --out DIR", needs=NEEDS,
               description="tables, ranks, correlations, Pareto frontier, dashboard (SPEC section 5)")


@dataclass(slots=True)
class ReportResult:
    teacher_dataset: pl.DataFrame
    files: list[str] = field(default_factory=list)
    report: Report | None = None
    """What was written: the computed tables, the paper tables and the changes beside them."""
    recorded: RecordedRun | None = None
    """The run record stored by a benchmark run's report stage."""

    @property
    def data(self) -> ReportData | None:
        return self.report.data if self.report is not None else None


@dataclass(frozen=True, slots=True)
class ReportStage:
    out: Path
    config: ReportConfig = ReportConfig()
    name: str = "report"
    record: RunInfo | None = None
    """A benchmark run: store its run record before the files are written, so that diff.csv and the
    dashboard compare it with the previous run (`legival report` records nothing)."""

    def plan(self, store: Store) -> Plan[ReportData, ReportResult]:
        data = compute_report(store, self.config)
        return Plan([data], ReportResult(data.teacher_dataset), total=1)

    def run(self, units: Sequence[ReportData], executor: Executor) -> Iterator[list[ReportData]]:
        yield list(units)  # nothing to compute outside the store: the tables are the plan

    def commit(self, store: Store, results: Sequence[ReportData], plan: Plan[ReportData, ReportResult]) -> int:
        for data in results:
            if self.record is not None:
                plan.summary.recorded = record_run(store, data, self.record)
            report = bundle(data, store, changes(store))
            plan.summary.report = report
            plan.summary.files = write_report(report, store, self.out)
        return len(results)


def build_reports(store: Store, out: str | Path, config: ReportConfig | None = None) -> ReportResult:
    """`legival report`: compute everything from the store and write the report directory."""
    return run_stage(ReportStage(Path(out), config or ReportConfig()), store)
