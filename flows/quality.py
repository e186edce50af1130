from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="quality", flow_run_name=run_name("quality"))
@ends_cancelled
def quality(spec: str, db: str | None = None) -> dict[str, Any]:
    """gCoT text-quality dimensions for the traces that lack them."""
    return summary_dict(run_registered("quality", spec, db, enable="quality")[0])
