"""`legival calibrate SPEC`: a short measured sample of the transfer, whose timings calibrate `legival plan`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from prefect import flow

from flows.session import driver_session, ends_cancelled, load_run, selected_teachers
from legival_core.runs.record import new_run_id
from legival_core.stages.registered import RunContext, stage_info, stages_before
from tasks.prefect_ui import run_name, tagged
from tasks.stages import plan_task, plan_vs_actual, run_jobs, run_shards

SAMPLE_TRACES = 2
"""Transfer traces per (teacher, dataset) a calibration rolls out by default."""


@flow(name="calibrate", flow_run_name=run_name("calibrate"))
@ends_cancelled
def calibrate(spec: str, db: str | None = None, traces: int = SAMPLE_TRACES,
              teachers: list[str] | None = None) -> dict[str, Any]:
    """The transfer stage on the first `traces` transfer traces of every (teacher, dataset) with trace
    files (a generating teacher is left out: generation is not a sample), after the stages it needs,
    on the spec's engines: its batches' timings go to the store under a `calibrate-...` run id, and
    its rollouts stay (a run reuses them). The summary has the transfer's counts, `plan_vs_actual`
    (the plan's estimate for the sample against what it took) and the teachers used."""
    s, dbp, _ = load_run(spec, db)
    chosen = [t.name for t in selected_teachers(s, teachers) if t.generate is None]
    if not chosen:
        raise ValueError("no teacher of the spec has trace files to calibrate on (generating teachers are left out)")
    limit = traces if s.transfer.limit is None else min(traces, s.transfer.limit)
    s = s.model_copy(update={"transfer": s.transfer.model_copy(update={"enabled": True, "limit": limit})})
    run_id = f"calibrate-{new_run_id(datetime.now(UTC))}"
    ctx = RunContext(s, tuple(chosen), None, {"run_id": run_id, "source": "calibrate", "counts": {}})
    info = stage_info("transfer")
    with driver_session(dbp, s.execution), tagged(s, chosen):
        for before in stages_before("transfer"):
            jobs = before.jobs(ctx)
            if jobs:
                run_jobs(dbp, before, jobs, s)
        planned = plan_task(dbp, s, chosen)
        began = time.time()
        results, engines = run_shards(dbp, info, info.jobs(ctx), s)
        part = info.summary(results)
        pva = plan_vs_actual(s.name, planned, part, results, began)
    return {**part, "run_id": run_id, "teachers": chosen, "traces_per_cell": limit, "engines_loaded": engines,
            "plan_vs_actual": pva}
