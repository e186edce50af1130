from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import monitor_task


@flow(name="monitor", flow_run_name=run_name("monitor"))
def monitor(spec: str, db: str | None = None) -> dict[str, Any]:
    """The spec's `monitor:` supervisor on the items without a verdict; runs even when the section is
    not enabled (a flow asked for by name)."""
    s, dbp, _ = load_run(spec, db)
    with driver_session(dbp, s.execution), tagged(s):
        return monitor_task(dbp, s.monitor, s.supervisor(), s.execution)
