from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from legival_core.reports.compute.data import ReportConfig
from tasks.monitor import run_name, tagged
from tasks.stages import aggregate_task


@flow(name="aggregate", flow_run_name=run_name("aggregate"))
def aggregate(spec: str, db: str | None = None, out: str | None = None) -> dict[str, Any]:
    """Reports (tables, Pareto frontier, correlations, dashboard) from the store alone."""
    s, dbp, outp = load_run(spec, db, out)
    with driver_session(dbp, s.execution), tagged(s):
        return asdict(aggregate_task(dbp, outp, ReportConfig.from_spec(s)))
