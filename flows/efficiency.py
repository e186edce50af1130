from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="efficiency", flow_run_name=run_name("efficiency"))
@ends_cancelled
def efficiency(spec: str, db: str | None = None) -> dict[str, Any]:
    """Lengths, redundancy and lexical backtracking for every trace that lacks them."""
    return summary_dict(run_registered("efficiency", spec, db)[0])
