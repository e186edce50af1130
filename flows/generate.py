from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow

from flows._common import driver_session, load_run
from tasks.prefect_ui import run_name, tagged
from tasks.stages import generate_task


@flow(name="generate", flow_run_name=run_name("generate"))
def generate(spec: str, db: str | None = None, teachers: list[str] | None = None) -> list[dict[str, Any]]:
    """Teacher traces from a model for each spec teacher with `generate:` (or the named ones), one
    task per teacher on the driver, stored like ingested traces; a rerun generates nothing."""
    s, dbp, _ = load_run(spec, db)
    chosen = s.generating_teachers(teachers)
    for t in chosen:  # every missing problems file is reported before any model loads
        assert t.generate is not None
        t.generate.jobs(s.datasets, t.name)
    task = generate_task.with_options(retries=s.execution.retries)
    with driver_session(dbp, s.execution), tagged(s, [t.name for t in chosen]):
        return [asdict(task(dbp, t, s.datasets)) for t in chosen]
