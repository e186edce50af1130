"""The report as a stage: plan = read the store and compute every table, commit = write the files.

`legival report` and the Prefect `report` task both run it through `run_stage`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from legival_core.reports.build import ReportResult, compute_report, write_report
from legival_core.reports.data import ReportConfig, ReportData
from legival_core.reports.diff import changes
from legival_core.reports.runs import RunInfo, record_run
from legival_core.stages.base import Executor, Plan, register_stage, run_stage
from legival_core.store import Store

register_stage("report", "legival report --db DB --out DIR",
               needs=("grade", "efficiency", "transfer", "judge", "quality", "rewards", "monitor"),
               description="tables, ranks, correlations, Pareto frontier, dashboard (SPEC section 5)")


@dataclass(frozen=True, slots=True)
class ReportStage:
    out: Path
    config: ReportConfig = ReportConfig()
    name: str = "report"
    needs: tuple[str, ...] = ("grade", "efficiency", "transfer", "judge", "quality", "rewards", "monitor")
    record: RunInfo | None = None
    """A benchmark run: store its run record before the files are written, so that diff.csv and the
    dashboard compare it with the previous run (`legival report` records nothing)."""

    def plan(self, store: Store) -> Plan[ReportData, ReportResult]:
        data = compute_report(store, self.config, with_changes=self.record is None)
        return Plan([data], ReportResult(data.teacher_dataset, data=data), total=1)

    def run(self, units: Sequence[ReportData], executor: Executor) -> Iterator[list[ReportData]]:
        yield list(units)  # nothing to compute outside the store: the tables are the plan

    def commit(self, store: Store, results: Sequence[ReportData], plan: Plan[ReportData, ReportResult]) -> int:
        for data in results:
            if self.record is not None:
                plan.summary.recorded = record_run(store, data, self.record)
                data.changes = changes(store)
            plan.summary.files = write_report(data, store, self.out)
        return len(results)


def build_reports(store: Store, out: str | Path, config: ReportConfig | None = None) -> ReportResult:
    """`legival report`: compute everything from the store and write the report directory."""
    return run_stage(ReportStage(Path(out), config or ReportConfig()), store)
