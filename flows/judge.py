from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.stages import judge_task


@flow(name="judge")
def judge(spec: str, db: str | None = None) -> dict[str, Any]:
    """Backtracking by the spec's judge for the traces without a result from it."""
    s, dbp, _ = load_run(spec, db)
    with driver_session():
        return judge_task(dbp, s.judge)
