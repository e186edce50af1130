from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow

from flows.session import driver_session, ends_cancelled, load_run, selected_teachers
from legival_core.laps import Laps
from legival_core.lifecycle.cancel import raise_if_cancelled
from legival_core.runs.record import new_run_id
from legival_core.stages.conditions import JobsFailed, StagesFailed
from legival_core.stages.registered import RunContext, StageInfo, stages_in_order
from tasks.prefect_ui import benchmark_progress, flow_run_link, run_name
from tasks.stages import plan_task, plan_vs_actual, run_jobs, run_shards


@flow(name="benchmark", flow_run_name=run_name("benchmark"))
@ends_cancelled
def benchmark(spec: str, db: str | None = None, out: str | None = None,
              teachers: list[str] | None = None) -> dict[str, Any]:
    """The full DAG: every registered stage in `needs` order (`stages_in_order`), each running the
    jobs its registration builds for this spec (none when its section is off): ingest (trace-file
    teachers) or generate (teachers with `generate:`) -> grade -> efficiency -> transfer (one task
    per shard; `legival plan` on the store first: an artifact, and `plan_vs_actual` in the summary)
    -> judge -> quality -> rewards -> monitor -> report, which stores the run record (`legival runs`)
    and compares it with the previous run (diff.csv, `changes-<spec>` artifact). A stage with a
    `prewarm` (the first student's engines, when this run stored new traces) starts it as soon as
    the stages it needs have run. Stage tasks are called directly (a subflow per stage costs ~1 s of
    bookkeeping each, which a fully cached rerun would feel). The run carries the spec and teacher
    tags, an overall progress artifact and, at the end, the rank table (`tasks.prefect_ui`).

    `teachers` restricts ingest/generate and transfer to those teachers (the per-teacher
    deployments); the other stages compute whatever the store lacks, and the aggregates cover every stored teacher.

    A stage whose jobs fail for a known outside reason (a key refused, an endpoint down:
    `stages.conditions.service_failure`) does not end the run: its reason is stored (the report's
    coverage names it), the stages that need it are not run, every other stage and the report are,
    and the run then ends with `StagesFailed` (its summary attached): the command prints the summary
    and one `error:` line, exit 2; the Prefect run is Failed with that line.
    """
    t0 = time.perf_counter()
    started = datetime.now(UTC)
    s, dbp, outp = load_run(spec, db, out)
    summary: dict[str, Any] = {"spec": str(spec), "db": dbp, "out": outp}
    laps = Laps()
    chosen = selected_teachers(s, teachers)
    flow_run_id, ui_url = flow_run_link()
    run: dict[str, Any] = {"started": started, "spec_path": str(spec), "flow_run_id": flow_run_id, "ui_url": ui_url,
                           "counts": summary, "run_id": new_run_id(started)}
    ctx = RunContext(s, tuple(teachers) if teachers else None, Path(outp), run)
    order = stages_in_order()

    # every job built now: a missing problems file (generate) fails the run before any model loads
    jobs = {info.name: info.jobs(ctx) for info in order}
    stages = [info.name for info in order if jobs[info.name]]
    failed: dict[str, str] = {}
    not_run: dict[str, str] = {}
    with driver_session(dbp, s.execution), benchmark_progress(s, [t.name for t in chosen], laps, stages) as mon:
        ran: set[str] = set()
        warmed: set[str] = set()
        for info in order:
            raise_if_cancelled(f"the {info.name} stage")  # no stage starts after a cancel
            mine = jobs[info.name]
            blocker = next((d for d in (*info.needs, *info.requires) if d in failed or d in not_run), None)
            if blocker is not None and not info.partial_inputs:
                if mine:  # a stage failed as a whole: what needs it waits for the next run
                    not_run[info.name] = f"needs {blocker}, which " + ("failed" if blocker in failed else "did not run")
                _merge(summary, info.summary([]))
                continue
            _prewarm(order, ran, warmed, ctx)
            try:
                part = _run_stage(info, mine, dbp, s, teachers, mon, summary)
            except JobsFailed as e:  # known outside reasons, stored; the other jobs' results kept
                failed[info.name] = e.reason
                part = info.summary(e.results)
            _merge(summary, part)
            ran.add(info.name)
            if mine:
                mon.lap(info.name)
        if failed:
            summary["failed_stages"], summary["not_run_stages"] = failed, not_run
        mon.finish(summary)
        if failed:
            laps.lap("shutdown")
            summary["stage_s"], summary["wall_s"] = laps.seconds, round(time.perf_counter() - t0, 3)
            raise StagesFailed(failed, not_run, summary)
    laps.lap("shutdown")
    summary["stage_s"] = laps.seconds
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    return summary


def _run_stage(info: StageInfo, mine: list[Any], dbp: str, s: Any, teachers: list[str] | None, mon: Any,
               summary: dict[str, Any]) -> dict[str, Any]:
    """One stage's jobs (a shard stage: planned first, then its shards); its part of the summary."""
    if not info.shards:
        return info.summary(run_jobs(dbp, info, mine, s) if mine else [])
    planned = plan_task(dbp, s, teachers) if mine else None
    if planned is not None:
        mon.planned(planned)
    began = time.time()
    results, engines = run_shards(dbp, info, mine, s) if mine else ([], 0)
    part = {**info.summary(results), "engines_loaded": engines}
    if planned is not None:
        summary["plan_vs_actual"] = plan_vs_actual(s.name, planned, part, results, began)
    return part


def _prewarm(order: list[StageInfo], ran: set[str], warmed: set[str], ctx: RunContext) -> None:
    """Start the slow loads (`StageInfo.prewarm`) of the stages whose needs have all run."""
    for info in order:
        if info.prewarm is None or info.name in warmed or info.name in ran:
            continue
        if set(info.needs) | set(info.requires) <= ran | {i.name for i in order if not i.build}:
            warmed.add(info.name)
            work = info.prewarm(ctx)
            if work is not None:
                from tasks.ray_pool import RayExecutor

                RayExecutor(ctx.spec.execution).prewarm(work)


def _merge(summary: dict[str, Any], part: dict[str, Any]) -> None:
    """A stage's keys into the run's summary; a count two stages give is summed (new traces of
    ingest and generate)."""
    for k, v in part.items():
        old = summary.get(k)
        if isinstance(old, int) and isinstance(v, int) and not isinstance(v, bool):
            summary[k] = old + v
        else:
            summary[k] = v
