from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow

from flows._common import driver_session, load_run, selected_teachers
from tasks.prefect_ui import run_name, tagged
from tasks.stages import ingest_teacher_task


@flow(name="ingest", flow_run_name=run_name("ingest"))
def ingest(spec: str, db: str | None = None, teachers: list[str] | None = None) -> list[dict[str, Any]]:
    """Ingest each selected teacher's trace files (one task per teacher); teachers with `generate:`
    are skipped (the `generate` flow stores theirs)."""
    s, dbp, _ = load_run(spec, db)
    chosen = selected_teachers(s, teachers)
    with driver_session(dbp, s.execution), tagged(s, [t.name for t in chosen]):
        return [asdict(ingest_teacher_task(dbp, t, s.ingest)) for t in chosen if t.generate is None]
