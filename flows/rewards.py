from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import rewards_task


@flow(name="rewards", flow_run_name=run_name("rewards"))
def rewards(spec: str, db: str | None = None) -> dict[str, Any]:
    """Reward-model scores (the spec's `rewards:` models) for the traces that lack them; runs even
    when the section is not enabled (a flow asked for by name)."""
    s, dbp, _ = load_run(spec, db)
    with driver_session(dbp, s.execution), tagged(s):
        return rewards_task(dbp, s.rewards, s.execution)
