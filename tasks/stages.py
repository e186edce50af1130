"""The registered stages as Prefect tasks: one task per `Job` (`legival_core.stages.registered`).

Every stage of a run goes through `stage_task`, whatever the stage: a new stage module needs no task
of its own. Task runs are named after the job (`ingest <teacher>`, `judge lexical`, `quality
clarity,cohesion,z3`, `rewards <model>`, `monitor <supervisor>`, `report`), retried as the stage's
registration says (`retry`, `retries`), and log their counts with the run logger. On a Ray cluster
(or with the section's `num_gpus` set) a stage registered with `gpus` runs its `Work` on Ray actors
(`tasks.ray_pool.RayExecutor`), whose pool is released after the job; else in this process. A
shard stage (transfer) runs its jobs with `run_shards`: one student's shards concurrently on its
engines, the engines released before the next student's load.
`cache_policy=NO_CACHE`: the cross-run cache is DuckDB, keyed by content; Prefect's default key
includes the flow-run id and would only add bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from legival_core.lifecycle.cancel import Cancelled, cancel_reason, cancel_requested, raise_if_cancelled
from legival_core.run_config import BenchmarkSpec, Execution
from legival_core.stages.registered import Job, RunContext, StageInfo, stage_info, summary_dict
from tasks._retry import retry_generation, retry_transient
from tasks.prefect_ui import publish_markdown, publish_plan, run_logger
from tasks.progress import BOARD
from tasks.store_lock import locked_store

RETRY_CONDITIONS: dict[str, Callable[..., bool] | None] = {
    "transient": retry_transient, "generation": retry_generation, "never": None}


def stage_jobs(name: str, spec: BenchmarkSpec, teachers: list[str] | None = None, out: str | None = None,
               run: dict[str, Any] | None = None) -> list[Job]:
    """The jobs of the registered stage `name` for this spec (empty when its section is off)."""
    return stage_info(name).jobs(RunContext(spec, tuple(teachers) if teachers else None,
                                            Path(out) if out else None, run or {}))


def with_retries(t: Any, info: StageInfo, execution: Execution, label: str) -> Any:
    """`t` with the stage's retry policy and the job's task-run name."""
    retries = execution.retries if info.retries is None else info.retries
    condition = RETRY_CONDITIONS[info.retry] if retries else None
    return t.with_options(name=info.name, task_run_name=label, retries=retries,
                          retry_delay_seconds=info.retry_delay_s, retry_condition_fn=condition)


@task(name="stage", cache_policy=NO_CACHE)
def stage_task(db: str, job: Job, spec: BenchmarkSpec) -> Any:
    return _ends_cancelled(lambda: run_job(db, job, spec))


def _ends_cancelled(fn: Callable[[], Any]) -> Any:
    """`fn()`; a cancel (`Cancelled`) ends the task run in Prefect's Cancelled state (the UI shows the
    run cancelled, not failed or crashed); the caller then gets Prefect's `CancelledRun`."""
    try:
        return fn()
    except Cancelled as e:
        from prefect.states import Cancelled as CancelledState

        return CancelledState(message=str(e))


def was_cancelled(e: BaseException) -> bool:
    """A task or flow that ended cancelled, as its caller sees it."""
    from prefect.exceptions import CancelledRun

    return isinstance(e, Cancelled | CancelledRun)


def run_job(db: str, job: Job, spec: BenchmarkSpec) -> Any:
    """One job of a stage on the driver's store: on Ray when its registration says so
    (`StageInfo.gpus`, `ray_executor`), its progress as events of the progress file, its counts
    logged, the engine pool it names released after."""
    info = stage_info(job.stage)
    executor = ray_executor(spec.execution, info.gpus(spec)) if info.gpus is not None else None

    def progress(done: int, total: int) -> None:
        BOARD.event(job.stage, job=job.label, done=done, total=total)

    try:
        result = job.run(lambda: locked_store(db), executor, progress)
    finally:
        if executor is not None and job.release is not None:
            from tasks.ray_pool import release_pool

            release_pool(job.release)
    d = summary_dict(result)
    if d.get("status") == "unavailable":  # a model not installed here: its rows say so, the run goes on
        run_logger().warning("%s: unavailable (%s)", job.label, d.get("reason"))
    BOARD.event(job.stage, job=job.label, **_numbers(d))
    log_counts(job.label, d)
    return result


def run_jobs(db: str, info: StageInfo, jobs: list[Job], spec: BenchmarkSpec) -> list[Any]:
    """A stage's jobs as tasks, one after the other (a shard stage: `run_shards`); its artifacts
    published. A job that fails for a known outside reason (`stages.conditions.service_failure`: a key
    refused, an endpoint down) does not stop the others: each such failure is stored with its reason
    (`stage_failures`, the report's coverage) and, once every job has run, `JobsFailed` carries the
    reasons and the other jobs' results. Anything else (a bug, a bad input) is raised at once."""
    results: list[Any] = []
    failures: dict[str, str] = {}
    for job in jobs:
        try:
            results.append(with_retries(stage_task, info, spec.execution, job.label)(db, job, spec))
        except Exception as e:
            if was_cancelled(e):
                raise Cancelled(str(e)) from e
            failures[job.label] = _stage_failure(db, info.name, job.label, e)
        raise_if_cancelled(f"the job after {job.label}")  # a cancelled task returns its state, raising nothing
    _settle(db, info.name, failures, results)
    if info.artifacts is not None:
        for kind, markdown in info.artifacts(results).items():
            publish_markdown(kind, spec.name, markdown, f"{kind} of the {spec.name} benchmark run")
    return results


def _stage_failure(db: str, stage: str, label: str, e: Exception) -> str:
    """The reason of a job's known outside failure, stored; `e` itself when it is anything else."""
    from legival_core.stages.conditions import reason, service_failure
    from legival_core.store import failures as failure_rows

    cause = service_failure(e)
    if cause is None:
        raise e
    why = reason(cause)
    with locked_store(db) as store:
        failure_rows.record_stage_failure(store, stage, label, why)
    run_logger().error("%s failed: %s", label, why)
    return why


def _settle(db: str, stage: str, failures: dict[str, str], results: list[Any]) -> None:
    """Every job has run: JobsFailed when some failed, else the stage's earlier failures are forgotten."""
    from legival_core.stages.conditions import JobsFailed
    from legival_core.store import failures as failure_rows

    if failures:
        raise JobsFailed(stage, failures, results)
    with locked_store(db) as store:
        failure_rows.clear_stage_failures(store, stage)


@task(name="shard", cache_policy=NO_CACHE)
def shard_task(db: str, job: Job, spec: BenchmarkSpec) -> Any:
    return _ends_cancelled(lambda: run_shard_job(db, job, spec.execution))


def run_shard_job(db: str, job: Job, execution: Execution) -> Any:
    """One shard on the students' engine pool (the Ray executor of `execution`), its position on
    the board (the run's progress artifact, the CLI's bar, the progress file)."""
    from tasks.ray_pool import RayExecutor

    seen: list[int] = []

    def report(done: int, total: int) -> None:
        """The first call carries the plan's cached rollouts (not committed by this run)."""
        BOARD.shard(job.label.removeprefix(f"{job.stage} "), done, total, committed=done - seen[-1] if seen else 0)
        seen.append(done)

    try:
        result = job.run(lambda: locked_store(db), RayExecutor(execution), report)
    except Exception as e:  # the engines a cancel killed: the shard is cancelled, not failed
        if cancel_requested() and not isinstance(e, Cancelled):
            raise Cancelled(f"cancelled ({cancel_reason()}) during {job.label}") from e
        raise
    log_counts(job.label, summary_dict(result))
    return result


def run_shards(db: str, info: StageInfo, jobs: list[Job], spec: BenchmarkSpec) -> tuple[list[Any], int]:
    """The jobs of a shard stage: those of one engine pool (`Job.release`: one student) concurrently,
    then that pool released before the next one loads (`execution.max_concurrent_engines` engines of
    one student fill the cluster, so a second student's engines could not be placed until the
    first's are gone). After the last pool, every engine and a local Ray stop, so the stages after
    do not share the CPUs with idle engines. Returns the results and the engines loaded."""
    from tasks.ray_pool import loaded_engines, release_pool, shutdown_pools

    shard = with_retries(shard_task, info, spec.execution, "")
    results: list[Any] = []
    engines = 0
    pools = list(dict.fromkeys(j.release for j in jobs))
    failures: dict[str, str] = {}
    for pool in pools:
        raise_if_cancelled(f"the {info.name} shards of the next engine pool")
        mine = [j for j in jobs if j.release == pool]
        futures = [(j, shard.with_options(task_run_name=j.label).submit(db, j, spec)) for j in mine]
        errors: list[tuple[Job, Exception]] = []
        for j, f in futures:  # every shard's end is awaited: none may still use the engines or Ray below
            try:
                results.append(f.result())
            except Exception as err:
                errors.append((j, err))
        cancelled = [failed for _j, failed in errors if was_cancelled(failed)]
        if cancelled:
            raise Cancelled(str(cancelled[0])) from cancelled[0]
        for j, failed in errors:  # a known outside failure is this shard's alone (run_jobs); the rest raise
            failures[j.label] = _stage_failure(db, info.name, j.label, failed)
        engines += loaded_engines()
        if pool is not None:
            release_pool(pool)
    shutdown_pools()
    _settle(db, info.name, failures, results)
    return results, engines


def _numbers(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def ray_executor(execution: Execution | None, num_gpus: float | None) -> Any:
    """A `RayExecutor` whose actors get `num_gpus` (default `execution.gpus_per_engine`) when the run
    uses a Ray cluster or `num_gpus` is set; None (this process) otherwise."""
    if execution is None or (execution.ray_address == "local" and not num_gpus):
        return None
    from tasks.ray_pool import RayExecutor

    gpus = execution.gpus_per_engine if num_gpus is None else num_gpus
    return RayExecutor(execution.model_copy(update={"gpus_per_engine": gpus}))


@task(name="plan", cache_policy=NO_CACHE, task_run_name="plan")
def plan_task(db: str, spec: BenchmarkSpec, teachers: list[str] | None) -> dict[str, Any]:
    """`legival plan` inside the run, on the store itself once the traces are stored and segmented:
    the plan's totals (compared with what the run did at its end) and a markdown artifact."""
    from legival_core.plan.build import plan_benchmark
    from legival_core.plan.render import markdown

    with locked_store(db) as store:
        p = plan_benchmark(spec, store, teachers=teachers)
    publish_plan(spec.name, markdown(p))
    t = p.totals()
    t["shards"] = [{"teacher": s.teacher, "dataset": s.dataset, "student": s.student, "seconds": s.seconds}
                   for s in p.shards]
    run_logger().info("plan: %d rollouts to generate (%d cached), %d prompt tokens (%d after prefix sharing), "
                      "%d judge calls", t["rollouts_missing"], t["rollouts_cached"], t["prompt_tokens"],
                      t["prompt_tokens_computed"], t["judge_calls"])
    return t


def plan_vs_actual(spec_name: str, planned: dict[str, Any], transfer: dict[str, Any], results: list[Any],
                   started: float) -> dict[str, Any]:
    """Planned and generated rollouts and first-pass prompt tokens of this run, and its transfer time:
    `wall_s` from the stage's start (`started`, epoch seconds) to now, plus the part of an engine's
    model load that ran before it (prewarmed), against the plan's estimate; per shard, its rollouts'
    engine seconds against the plan's. Published as the `plan-vs-actual-<spec>` artifact."""
    import time

    loads = [(r.summary.load_started, r.summary.load_s) for r in results if r.summary.load_started is not None]
    before = max((max(0.0, min(started, t0 + s) - t0) for t0, s in loads), default=0.0)
    planned_s = {(x["teacher"], x["dataset"], x["student"]): x["seconds"] for x in planned.get("shards", [])}
    shards = [{"shard": f"{r.teacher} x {r.dataset} x {r.student}",
               "planned_s": planned_s.get((r.teacher, r.dataset, r.student)),
               "actual_s": round(r.summary.compute_s, 1)} for r in results]
    out = {"rollouts": {"planned": planned["rollouts_missing"], "actual": transfer.get("rollouts_generated", 0)},
           "prompt_tokens": {"planned": planned["prompt_tokens"], "actual": transfer.get("prompt_tokens", 0)},
           "wall_s": {"planned": planned.get("estimated_wall_s"), "actual": round(time.time() - started + before, 1)},
           "shards": shards}
    publish_markdown("plan-vs-actual", spec_name, time_markdown(out), "the transfer's time: planned and actual")
    return out


def time_markdown(pva: dict[str, Any]) -> str:
    """`plan_vs_actual`'s times as markdown: per shard, then the transfer's wall time."""
    from legival_core import markdown
    from legival_core.plan.render import duration

    def ratio(planned: float | None, actual: float) -> str:
        return f"{planned / actual:.2f}" if planned is not None and actual > 0 else "-"

    lines = ["# Transfer time: planned and actual", "",
             markdown.row(["shard", "planned engine s", "actual engine s", "planned / actual"]), "|---|---:|---:|---:|"]
    for x in pva["shards"]:
        lines.append(markdown.row([markdown.cell(x["shard"]), "-" if x["planned_s"] is None else f"{x['planned_s']:,.1f}",
                                   f"{x['actual_s']:,.1f}", ratio(x["planned_s"], x["actual_s"])]))
    w = pva["wall_s"]
    lines += ["", f"Wall time of the transfer (engine start included): planned {duration(w['planned'])}, actual "
                  f"{duration(w['actual'])}, planned / actual {ratio(w['planned'], w['actual'])}."]
    return "\n".join(lines) + "\n"


def log_counts(what: str, counts: dict[str, Any]) -> None:
    """`what: a=1, b=2, rows.clarity=20` (numbers, and the numbers of nested dicts)."""
    flat = {f"{k}.{k2}" if isinstance(v, dict) else k: v2 for k, v in counts.items()
            for k2, v2 in (v.items() if isinstance(v, dict) else [(k, v)])}
    shown = [f"{k}={v}" for k, v in flat.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    run_logger().info("%s: %s", what, ", ".join(shown) or "nothing to do")
