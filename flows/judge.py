from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="judge", flow_run_name=run_name("judge"))
@ends_cancelled
def judge(spec: str, db: str | None = None) -> dict[str, Any]:
    """Backtracking by the spec's judge for the traces without a result from it."""
    return summary_dict(run_registered("judge", spec, db, enable="judge")[0])
