from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="monitor", flow_run_name=run_name("monitor"))
@ends_cancelled
def monitor(spec: str, db: str | None = None) -> dict[str, Any]:
    """The spec's `monitor:` supervisor on the items without a verdict; runs even when the section is
    not enabled (a flow asked for by name)."""
    return summary_dict(run_registered("monitor", spec, db, enable="monitor")[0])
