from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import quality_task


@flow(name="quality", flow_run_name=run_name("quality"))
def quality(spec: str, db: str | None = None) -> dict[str, Any]:
    """gCoT text-quality dimensions for the traces that lack them."""
    s, dbp, _ = load_run(spec, db)
    with driver_session(dbp, s.execution), tagged(s):
        return quality_task(dbp, s.quality)
