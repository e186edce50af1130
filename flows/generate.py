from __future__ import annotations

from typing import Any

from prefect import flow

from flows.session import ends_cancelled, run_registered
from legival_core.run_config import load_spec
from legival_core.stages.registered import summary_dict
from tasks.prefect_ui import run_name


@flow(name="generate", flow_run_name=run_name("generate"))
@ends_cancelled
def generate(spec: str, db: str | None = None, teachers: list[str] | None = None) -> list[dict[str, Any]]:
    """Teacher traces from a model for each spec teacher with `generate:` (or the named ones), one
    task per teacher on the driver, stored like ingested traces; a rerun generates nothing. Every
    missing problems file is reported before any model loads."""
    load_spec(spec).generating_teachers(teachers)  # a named teacher without `generate` is an error
    return [summary_dict(r) for r in run_registered("generate", spec, db, teachers=teachers)]
