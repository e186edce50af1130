"""The report as a stage: its one unit is the report; commit reads the store and computes every
table, records the run (a benchmark run), compares it with the previous one, and writes the files
(the report is a read model of the store: its work cannot leave the store's process).

`legival report` and the Prefect `report` task both run it through `run_stage`. The rooms it joins:
`reports.compute` (tables from the store), `runs` (run records and their diff), `reports.paper`
(the papers' tables from the computed ones) and `reports.render` (files, figures, dashboard)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.reports.compute.build import compute_report
from legival_core.reports.compute.data import ReportConfig, ReportData
from legival_core.reports.render.bundle import Report, bundle
from legival_core.reports.render.files import write_report
from legival_core.runs.diff import changes, diff_markdown, headline
from legival_core.runs.record import RecordedRun, RunInfo, record_run, spec_hash
from legival_core.stages.base import Executor, Plan, Progress, StoreAccess, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl

NEEDS = ("grade", "efficiency", "transfer", "judge", "quality", "rewards", "monitor")


@dataclass(slots=True)
class ReportResult:
    out: Path
    teacher_dataset: pl.DataFrame | None = None
    files: list[str] = field(default_factory=list)
    report: Report | None = None
    """What was written: the computed tables, the paper tables and the changes beside them."""
    recorded: RecordedRun | None = None
    """The run record stored by a benchmark run's report stage."""

    @property
    def data(self) -> ReportData | None:
        return self.report.data if self.report is not None else None

    @property
    def dashboard(self) -> Path | None:
        dash = self.out / "index.html"
        return dash if dash.is_file() else None

    @property
    def changes(self) -> str | None:
        """One line on what changed since the previous recorded run (a benchmark run's report)."""
        ch = self.report.changes if self.report is not None else None
        return headline(ch) if self.recorded is not None and ch is not None else None


@dataclass(frozen=True, slots=True)
class ReportStage:
    out: Path
    config: ReportConfig = ReportConfig()
    name: str = "report"
    record: RunInfo | None = None
    """A benchmark run: store its run record before the files are written, so that diff.csv and the
    dashboard compare it with the previous run (`legival report` records nothing)."""

    def plan(self, store: Store) -> Plan[ReportConfig, ReportResult]:
        return Plan([self.config], ReportResult(self.out), total=1)

    def run(self, units: Sequence[ReportConfig], executor: Executor) -> Iterator[list[ReportConfig]]:
        yield list(units)  # nothing to compute outside the store: every table is read from it

    def commit(self, store: Store, results: Sequence[ReportConfig], plan: Plan[ReportConfig, ReportResult]) -> int:
        for config in results:
            data = compute_report(store, config)
            plan.summary.teacher_dataset = data.teacher_dataset
            if self.record is not None:
                plan.summary.recorded = record_run(store, data, self.record)
            report = bundle(data, store, changes(store))
            plan.summary.report = report
            plan.summary.files = write_report(report, store, self.out)
        return len(results)


def build_reports(store: Store, out: str | Path, config: ReportConfig | None = None) -> ReportResult:
    """`legival report`: compute everything from the store and write the report directory."""
    return run_stage(ReportStage(Path(out), config or ReportConfig()), store)


def _report_jobs(ctx: RunContext) -> list[Job]:
    """The run's report. A benchmark run (`ctx.run` holds when it started) stores its record
    (`legival runs`), made when the job runs, so that it holds the summary of every stage before it."""
    spec, run = ctx.spec, ctx.run
    out = ctx.out or Path(spec.report.out)
    config = ReportConfig.from_spec(spec)

    def job(access: StoreAccess, _executor: Executor | None, _progress: Progress | None) -> ReportResult:
        record = None
        if "started" in run:
            record = RunInfo(spec.name, spec_hash(spec), run["started"], spec_path=run.get("spec_path"),
                             flow_run_id=run.get("flow_run_id"), ui_url=run.get("ui_url"),
                             teachers=ctx.teachers, counts=dict(run.get("counts", {})), run_id=run.get("run_id"))
        return run_stage(ReportStage(out, config, record=record), access)

    return [Job("report", "report", job, (ReportStage(out, config),))]


def _report_summary(results: list[Any]) -> dict[str, Any]:
    if not results:
        return {}
    r: ReportResult = results[0]
    dash = r.dashboard
    return {"report_files": len(r.files), "dashboard": str(dash) if dash is not None else None,
            "run_id": r.recorded.run_id if r.recorded is not None else None,
            "run_seq": r.recorded.seq if r.recorded is not None else None, "changes": r.changes}


def _report_artifacts(results: list[Any]) -> dict[str, str]:
    """The `changes-<spec>` artifact: what changed since the previous recorded run."""
    r = results[0] if results else None
    ch = r.report.changes if r is not None and r.report is not None and r.recorded is not None else None
    return {"changes": diff_markdown(ch)} if ch is not None else {}


register_stage("report", "legival report --db DB --out DIR", needs=NEEDS, build=_report_jobs,
               summarize=_report_summary, artifacts=_report_artifacts, order=1000, retries=0, partial_inputs=True,
               description="tables, ranks, correlations, Pareto frontier, dashboard (SPEC section 5)")
