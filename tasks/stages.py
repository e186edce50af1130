"""Per-stage Prefect tasks: ingest and generate (one per teacher), grade, efficiency, judge, quality,
rewards, monitor, report.

Each is a thin wrapper around one `legival_core` stage run by `run_stage` (the same stage objects the
CLI commands run), computing only what the store lacks. Task runs are named after their stage and
what it runs (`ingest <teacher>`, `judge lexical`, `quality clarity,cohesion,z3`, `rewards <models>`,
`monitor <supervisor>`, `report`), and each logs its counts with the run logger. On a Ray cluster (or
with the section's `num_gpus` set) the efficiency, rewards and monitor stages run their `Work` on
Ray actors (`tasks.ray_pool.RayExecutor`); else in this process.
`cache_policy=NO_CACHE`: the cross-run cache is DuckDB, keyed by content; Prefect's default key
includes the flow-run id and would only add bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from legival_core.spec import (
    BenchmarkSpec,
    Efficiency,
    Execution,
    Ingest,
    Judge,
    Monitor,
    Quality,
    Rewards,
    SupervisorModel,
    Teacher,
)
from tasks._driver import locked_store
from tasks._retry import retry_generation, retry_transient
from tasks.prefect_ui import publish_changes, publish_plan, run_logger
from tasks.progress import BOARD


class GeneratingTeacher(RuntimeError):
    """A teacher with `generate:` given to ingest: its traces come from `generate_task`."""


@dataclass(slots=True)
class IngestResult:
    teacher: str
    files: list[dict[str, Any]] = field(default_factory=list)
    new_traces: int = 0
    already_stored: int = 0


@task(name="ingest", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient,
      task_run_name="ingest {teacher.name}")
def ingest_teacher_task(db: str, teacher: Teacher, limits: Ingest | None = None) -> IngestResult:
    return ingest_teacher(db, teacher, limits)


def ingest_teacher(db: str, teacher: Teacher, limits: Ingest | None = None) -> IngestResult:
    """Ingest a teacher's trace files (re-ingest adds nothing: trace ids are content hashes)."""
    from legival_core.stages.ingest import ingest_spec_file

    if teacher.generate is not None:
        raise GeneratingTeacher(
            f"teacher {teacher.name!r} generates its traces ({teacher.generate.backend}, {teacher.generate.model}); "
            "it has no trace files to ingest: run `legival generate --spec` or `legival run`"
        )
    r = IngestResult(teacher.name)
    for path in teacher.traces:
        s = ingest_spec_file(lambda: locked_store(db), path, teacher.name, teacher.select, limits or Ingest())
        r.files.append(s.as_dict())
        r.new_traces += s.new_traces
        r.already_stored += s.already_stored
    BOARD.event("ingest", teacher=teacher.name, new_traces=r.new_traces)
    run_logger().info("ingest %s: %d new traces, %d already stored (%d files)", teacher.name, r.new_traces,
                      r.already_stored, len(r.files))
    return r


@dataclass(slots=True)
class GenerateResult:
    teacher: str
    datasets: list[dict[str, Any]] = field(default_factory=list)
    generated: int = 0
    cached: int = 0
    new_traces: int = 0
    already_stored: int = 0


@task(name="generate", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=10,
      retry_condition_fn=retry_generation, task_run_name="generate {teacher.name}")
def generate_task(db: str, teacher: Teacher, datasets: list[str]) -> GenerateResult:
    return generate_teacher(db, teacher, datasets)


def generate_teacher(db: str, teacher: Teacher, datasets: list[str]) -> GenerateResult:
    """Generate a teacher's traces on the driver (the only DuckDB writer) with `run_generate`: one
    engine per teacher for all its datasets (the model loads on first use: prompts are rendered by
    its chat template). A retry resumes: raw generations are cached per batch, and a rerun generates
    nothing. `datasets` are the spec's (`generate.datasets` defaults to them)."""
    from legival_core.datasets.base import get_dataset
    from legival_core.generation.config import load_model_config
    from legival_core.generation.engines import make_teacher_engine
    from legival_core.stages.generate import run_generate

    g = teacher.generate
    if g is None:
        raise ValueError(f"teacher {teacher.name!r} has trace files, not `generate`")
    jobs = g.jobs(datasets, teacher.name)
    cfg = load_model_config(g.config, g.model)
    engine = make_teacher_engine(g.backend, g.model, cfg.chat_template_kwargs, cfg.tokenizer, g.backend_options,
                                 g.base_url)
    r = GenerateResult(teacher.name)
    try:
        for dataset, path in jobs:
            spec = get_dataset(dataset)
            items = list(spec.load(path, g.format))[: g.limit]

            def progress(done: int, total: int, dataset: str = spec.name) -> None:
                BOARD.event("generate", teacher=teacher.name, dataset=dataset, done=done, total=total)

            with locked_store(db) as store:
                s = run_generate(store, engine, teacher.name, spec.name, items, cfg, g.max_new_tokens,
                                 g.batch_size, progress=progress, greedy=g.decoding == "greedy", seed=g.seed)
            d = s.as_dict()
            d["problems_file"] = str(path)
            r.datasets.append(d)
            r.generated += s.generated
            r.cached += s.cached
            r.new_traces += s.new_traces
            r.already_stored += s.already_stored
    finally:
        engine.close()
    run_logger().info("generate %s: %d generated, %d cached, %d new traces", teacher.name, r.generated, r.cached,
                      r.new_traces)
    return r


@task(name="grade", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient, task_run_name="grade")
def grade_task(db: str) -> dict[str, Any]:
    """Grade every trace that has no grade by the current grader of its dataset (after a grader
    version change this re-grades; new traces were graded when they were stored)."""
    from legival_core.stages.grade import grade_store

    s = grade_store(lambda: locked_store(db))
    d: dict[str, Any] = s.as_dict()
    BOARD.event("grade", graded=d.get("graded", 0))
    _log_counts("grade", d)
    return d


@task(name="efficiency", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient,
      task_run_name="efficiency")
def efficiency_task(db: str, config: Efficiency, execution: Execution | None = None) -> dict[str, Any]:
    """On a Ray cluster (or with `efficiency.num_gpus` set) the embedding runs as Ray work: actors with
    `num_gpus` = `efficiency.num_gpus` (default `execution.gpus_per_engine`); else in this process."""
    from legival_core.stages.efficiency import compute_efficiency

    s = compute_efficiency(lambda: locked_store(db), config, ray_executor(execution, config.num_gpus))
    BOARD.event("efficiency", **s.as_dict())
    _log_counts("efficiency", s.as_dict())
    return s.as_dict()


@task(name="judge", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=10, retry_condition_fn=retry_transient,
      task_run_name="judge {judge.name}")
def judge_task(db: str, judge: Judge) -> dict[str, Any]:
    from legival_core.stages.judge import run_judge

    s = run_judge(lambda: locked_store(db), judge)
    BOARD.event("judge", judge_calls=s.judge_calls)
    _log_counts(f"judge {judge.name}", s.as_dict())
    if s.every_call_failed:  # as `legival judge` exits 2: the run says why instead of looking done
        raise JudgeCallsFailed(s.failure_note())
    return s.as_dict()


class JudgeCallsFailed(RuntimeError):
    """Every judge call of the stage failed (unreachable endpoint, rejected key): not retried by
    Prefect (the judge already retried what could succeed); the traces not sent stay to do."""


def quality_run_name(parameters: dict[str, Any]) -> str:
    """`quality clarity,cohesion,z3`: the spec's groups (or metrics); `quality all` by default."""
    metrics = parameters["quality"].metrics
    return "quality " + (",".join(metrics) if metrics else "all")


@task(name="quality", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient,
      task_run_name=quality_run_name)  # type: ignore[arg-type]  # prefect's protocol also asks for a classmethod
def quality_task(db: str, quality: Quality) -> dict[str, Any]:
    from legival_core.stages.quality import compute_quality

    s = compute_quality(lambda: locked_store(db), quality.metrics)
    d: dict[str, Any] = s.as_dict()
    _log_counts(quality_run_name({"quality": quality}), d)
    return d


def ray_executor(execution: Execution | None, num_gpus: float | None) -> Any:
    """A `RayExecutor` whose actors get `num_gpus` (default `execution.gpus_per_engine`) when the run
    uses a Ray cluster or `num_gpus` is set; None (this process) otherwise."""
    if execution is None or (execution.ray_address == "local" and not num_gpus):
        return None
    from tasks.ray_pool import RayExecutor

    gpus = execution.gpus_per_engine if num_gpus is None else num_gpus
    return RayExecutor(execution.model_copy(update={"gpus_per_engine": gpus}))


def _release(executor: Any, key: str) -> None:
    """A stage done with its model on Ray: its engines go (their GPUs serve the next model)."""
    if executor is not None:
        from tasks.ray_pool import release_pool

        release_pool(key)


def rewards_run_name(parameters: dict[str, Any]) -> str:
    """`rewards skywork-v2-llama-8b,rb2-llama-8b,qwen2.5-math-prm-7b`: the spec's reward models."""
    return "rewards " + ",".join(s.name for s in parameters["rewards"].specs())


@task(name="rewards", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient,
      task_run_name=rewards_run_name)  # type: ignore[arg-type]  # as quality_task
def rewards_task(db: str, rewards: Rewards, execution: Execution | None = None) -> dict[str, Any]:
    """Every reward model on the traces it has not scored, one model after the other (on a cluster
    each model's actors are released before the next model loads). A model whose weights are not
    installed stores `unavailable` rows with the reason (the report's coverage shows it)."""
    from legival_core.stages.base import run_stage
    from legival_core.stages.rewards import RewardsStage, RewardSummary

    executor = ray_executor(execution, rewards.num_gpus)
    summary = RewardSummary()
    for spec in rewards.specs():
        stage = RewardsStage(spec, rewards.limit)
        try:
            summary.models.append(run_stage(stage, lambda: locked_store(db), executor))
        finally:
            _release(executor, stage.work_key)
    d = summary.as_dict()
    for m in summary.models:
        if m.status == "unavailable":
            run_logger().warning("rewards %s: unavailable (%s)", m.name, m.reason)
    BOARD.event("rewards", scored=d["rm_scored"], unavailable=d["rm_unavailable"])
    _log_counts(rewards_run_name({"rewards": rewards}), {m.name: m.scored for m in summary.models})
    return d


@task(name="monitor", cache_policy=NO_CACHE, retries=1, retry_condition_fn=retry_transient,
      task_run_name="monitor {supervisor.name}")
def monitor_task(db: str, monitor: Monitor, supervisor: SupervisorModel,
                 execution: Execution | None = None) -> dict[str, Any]:
    """The supervisor's verdicts on the items that have none; `status: unavailable` (and nothing
    stored) when its model is not installed."""
    from legival_core.stages.monitor import run_monitor_spec, supervisor_stage

    executor = ray_executor(execution, monitor.num_gpus)
    try:
        s = run_monitor_spec(lambda: locked_store(db), monitor, supervisor, executor)
    finally:
        _release(executor, supervisor_stage(monitor, supervisor).work_key)
    d: dict[str, Any] = s.as_dict()
    if s.status == "unavailable":
        run_logger().warning("monitor %s: unavailable (%s)", supervisor.name, s.reason)
    BOARD.event("monitor", asked=s.asked, cached=s.cached, status=s.status)
    _log_counts(f"monitor {supervisor.name}", d)
    return d


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
    run_logger().info("plan: %d rollouts to generate (%d cached), %d prompt tokens (%d after prefix sharing), "
                      "%d judge calls", t["rollouts_missing"], t["rollouts_cached"], t["prompt_tokens"],
                      t["prompt_tokens_computed"], t["judge_calls"])
    return t


def plan_vs_actual(planned: dict[str, Any], transfer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Planned and generated rollouts and first-pass prompt tokens of this run."""
    return {"rollouts": {"planned": planned["rollouts_missing"], "actual": transfer.get("rollouts_generated", 0)},
            "prompt_tokens": {"planned": planned["prompt_tokens"], "actual": transfer.get("prompt_tokens", 0)}}


@dataclass(slots=True)
class ReportTaskResult:
    out: str
    files: list[str]
    dashboard: str | None
    run_id: str | None = None
    """The run record stored by this report (a benchmark run), None for a plain report."""
    run_seq: int | None = None
    changes: str | None = None
    """One line: what changed since the previous recorded run (`diff.headline`)."""


@task(name="report", cache_policy=NO_CACHE, task_run_name="report")
def report_task(db: str, out: str, config: Any, record: Any = None) -> ReportTaskResult:
    """The report stage: tables, Pareto frontier, correlations, dashboard, from the store alone.
    `config` is a `legival_core.reports.compute.data.ReportConfig`; `record` a `legival_core.runs.record.RunInfo`
    (a benchmark run: its run record is stored, and what changed since the last run is published)."""
    from legival_core.reports.stage import ReportStage
    from legival_core.runs.diff import diff_markdown, headline
    from legival_core.stages.base import run_stage

    result = run_stage(ReportStage(Path(out), config, record=record), lambda: locked_store(db))
    files = sorted(result.files)
    dash = Path(out) / "index.html"
    run_logger().info("report: %s (%d files); dashboard: %s", out, len(files), dash if dash.is_file() else "(not built)")
    agg = ReportTaskResult(str(out), files, str(dash) if dash.is_file() else None)
    ch = result.report.changes if result.report is not None else None
    if result.recorded is not None and ch is not None:
        agg.run_id, agg.run_seq, agg.changes = result.recorded.run_id, result.recorded.seq, headline(ch)
        run_logger().info("run record #%d %s; %s", agg.run_seq, agg.run_id, agg.changes)
        publish_changes(record.spec_name, diff_markdown(ch))
    return agg


def _log_counts(what: str, counts: dict[str, Any]) -> None:
    """`what: a=1, b=2, rows.clarity=20` (numbers, and the numbers of nested dicts)."""
    flat = {f"{k}.{k2}" if isinstance(v, dict) else k: v2 for k, v in counts.items()
            for k2, v2 in (v.items() if isinstance(v, dict) else [(k, v)])}
    shown = [f"{k}={v}" for k, v in flat.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    run_logger().info("%s: %s", what, ", ".join(shown) or "nothing to do")
