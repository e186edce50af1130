from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from legival_core.reports.compute.data import ReportConfig
from tasks.prefect_ui import run_name, tagged
from tasks.stages import report_task


@flow(name="report", flow_run_name=run_name("report"))
def report(spec: str, db: str | None = None, out: str | None = None) -> dict[str, Any]:
    """Reports (tables, Pareto frontier, correlations, dashboard) from the store alone."""
    s, dbp, outp = load_run(spec, db, out)
    with driver_session(dbp, s.execution), tagged(s):
        return asdict(report_task(dbp, outp, ReportConfig.from_spec(s)))
