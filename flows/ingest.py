from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="ingest", flow_run_name=run_name("ingest"))
@ends_cancelled
def ingest(spec: str, db: str | None = None, teachers: list[str] | None = None) -> list[dict[str, Any]]:
    """Ingest each selected teacher's trace files (one task per teacher); teachers with `generate:`
    are skipped (the `generate` flow stores theirs)."""
    return [summary_dict(r) for r in run_registered("ingest", spec, db, teachers=teachers)]
