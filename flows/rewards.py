from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.rewards import RewardSummary
from tasks.prefect_ui import run_name


@flow(name="rewards", flow_run_name=run_name("rewards"))
@ends_cancelled
def rewards(spec: str, db: str | None = None) -> dict[str, Any]:
    """Reward-model scores (the spec's `rewards:` models) for the traces that lack them; runs even
    when the section is not enabled (a flow asked for by name)."""
    return RewardSummary(run_registered("rewards", spec, db, enable="rewards")).as_dict()
