from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from tasks.prefect_ui import run_name


@flow(name="report", flow_run_name=run_name("report"))
@ends_cancelled
def report(spec: str, db: str | None = None, out: str | None = None) -> dict[str, Any]:
    """Reports (tables, Pareto frontier, correlations, dashboard) from the store alone (no run record)."""
    r = run_registered("report", spec, db, out=out)[0]
    return {"out": str(r.out), "files": sorted(r.files), "dashboard": str(r.dashboard) if r.dashboard else None}
