from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from flows._common import driver_session, load_run, selected_teachers
from flows.transfer import transfer
from legival_core.laps import Laps
from legival_core.reports.compute.data import ReportConfig
from legival_core.runs.record import RunInfo, spec_hash
from tasks.prefect_ui import benchmark_progress, flow_run_link, run_name
from tasks.stages import (
    efficiency_task,
    generate_task,
    grade_task,
    ingest_teacher_task,
    judge_task,
    monitor_task,
    plan_task,
    plan_vs_actual,
    quality_task,
    report_task,
    rewards_task,
)


@flow(name="benchmark", flow_run_name=run_name("benchmark"))
def benchmark(spec: str, db: str | None = None, out: str | None = None,
              teachers: list[str] | None = None) -> dict[str, Any]:
    """The full DAG: ingest (trace-file teachers) or generate (teachers with `generate:`) -> grade
    (what the current graders have not graded) -> efficiency -> plan (`legival plan` on the store: an
    artifact, and `plan_vs_actual` in the summary) -> transfer (subflow, one task per shard) -> judge ->
    quality -> rewards -> monitor (these two only when enabled) -> report, which stores the run
    record (`legival runs`) and compares it with the previous run (diff.csv, `changes-<spec>` artifact). When this
    run stored new traces, the student engines start (Ray, actors, model loads) while efficiency
    runs. Stage tasks are called directly (a subflow per stage costs ~1 s of bookkeeping each,
    which a fully cached rerun would feel). The run carries the spec and teacher tags, an overall
    progress artifact and, at the end, the rank table (`tasks.prefect_ui`).

    `teachers` restricts ingest/generate and transfer to those teachers (the per-teacher
    deployments); the other stages compute whatever the store lacks, and the aggregates cover every stored teacher.
    """
    t0 = time.perf_counter()
    started = datetime.now(UTC)
    s, dbp, outp = load_run(spec, db, out)
    summary: dict[str, Any] = {"spec": str(spec), "db": dbp, "out": outp}
    laps = Laps()
    chosen = selected_teachers(s, teachers)

    with driver_session(dbp, s.execution), benchmark_progress(s, [t.name for t in chosen], laps) as mon:
        lap = mon.lap
        for t in chosen:  # a missing problems file fails the run before any model loads
            if t.generate is not None:
                t.generate.jobs(s.datasets, t.name)
        gen_task = generate_task.with_options(retries=s.execution.retries)
        ing = [ingest_teacher_task(dbp, t, s.ingest) for t in chosen if t.generate is None]
        gen = [gen_task(dbp, t, s.datasets) for t in chosen if t.generate is not None]
        summary["new_traces"] = sum(r.new_traces for r in ing) + sum(r.new_traces for r in gen)
        summary["generated_traces"] = sum(r.generated for r in gen)
        summary["regraded"] = grade_task(dbp).get("graded", 0)
        lap("ingest")
        if s.transfer.enabled and summary["new_traces"] > 0:  # new traces: rollouts to generate
            from tasks.transfer import prewarm

            prewarm([s.student_config(st) for st in s.students], s.execution)  # overlaps efficiency
        summary["efficiency"] = efficiency_task(dbp, s.efficiency, s.execution)
        lap("efficiency")
        tr: dict[str, Any] = {"rollouts_total": 0, "rollouts_cached": 0, "rollouts_generated": 0, "engines_loaded": 0}
        if s.transfer.enabled:
            planned = plan_task(dbp, s, teachers)
            runner: Any = ThreadPoolTaskRunner(max_workers=s.execution.max_concurrent_shards)
            tr = transfer.with_options(task_runner=runner)(spec, db=dbp, teachers=teachers)
            summary["plan_vs_actual"] = plan_vs_actual(planned, tr)
        summary.update({k: v for k, v in tr.items() if k != "shards"})
        lap("transfer")
        summary["judge_calls"] = judge_task(dbp, s.judge)["judge_calls"] if s.judge.enabled else 0
        lap("judge")
        if s.quality.enabled:
            summary["quality"] = quality_task(dbp, s.quality)
        lap("quality")
        if s.rewards.enabled:
            summary["rewards"] = rewards_task(dbp, s.rewards, s.execution)
            lap("rewards")
        if s.monitor.enabled:
            summary["monitor"] = monitor_task(dbp, s.monitor, s.supervisor(), s.execution)
            lap("monitor")
        flow_run_id, ui_url = flow_run_link()
        record = RunInfo(s.name, spec_hash(s), started, spec_path=str(spec), flow_run_id=flow_run_id, ui_url=ui_url,
                         teachers=tuple(teachers) if teachers else None, counts=dict(summary))
        ag = asdict(report_task(dbp, outp, ReportConfig.from_spec(s), record))
        summary["report_files"] = len(ag["files"])
        summary["dashboard"] = ag["dashboard"]
        summary["run_id"], summary["run_seq"], summary["changes"] = ag["run_id"], ag["run_seq"], ag["changes"]
        lap("report")
        mon.finish(summary)
    laps.lap("shutdown")
    summary["stage_s"] = laps.seconds
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    return summary
