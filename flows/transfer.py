from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from flows.session import driver_session, ends_cancelled, load_run, selected_teachers
from legival_core.stages.registered import stage_info
from tasks.prefect_ui import run_name, tagged
from tasks.stages import run_shards, stage_jobs


@flow(name="transfer", flow_run_name=run_name("transfer"),
      task_runner=ThreadPoolTaskRunner(max_workers=4))  # type: ignore[arg-type]
@ends_cancelled
def transfer(spec: str, db: str | None = None, teachers: list[str] | None = None) -> dict[str, Any]:
    """One task per (teacher, dataset, student) shard; each fans out on Ray. Students take turns on
    the engines (`tasks.stages.run_shards`)."""
    s, dbp, _ = load_run(spec, db)
    s = s.model_copy(update={"transfer": s.transfer.model_copy(update={"enabled": True})})
    info = stage_info("transfer")
    jobs = stage_jobs("transfer", s, teachers)
    chosen = selected_teachers(s, teachers)
    with driver_session(dbp, s.execution), tagged(s, [t.name for t in chosen]):
        results, engines = run_shards(dbp, info, jobs, s)
    return {**info.summary(results), "engines_loaded": engines, "shards": [r.as_dict() for r in results]}
