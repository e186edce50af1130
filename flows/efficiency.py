from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import efficiency_task


@flow(name="efficiency", flow_run_name=run_name("efficiency"))
def efficiency(spec: str, db: str | None = None) -> dict[str, Any]:
    """Lengths, redundancy and lexical backtracking for every trace that lacks them."""
    s, dbp, _ = load_run(spec, db)
    with driver_session(dbp, s.execution), tagged(s):
        return efficiency_task(dbp, s.efficiency, s.execution)
