from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import judge_task


@flow(name="judge", flow_run_name=run_name("judge"))
def judge(spec: str, db: str | None = None) -> dict[str, Any]:
    """Backtracking by the spec's judge for the traces without a result from it."""
    s, dbp, _ = load_run(spec, db)
    with driver_session(dbp, s.execution), tagged(s):
        return judge_task(dbp, s.judge)
