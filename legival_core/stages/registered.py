"""The registered stage: the one entry point through which `legival run`, the Prefect flows and
`legival plan` find, order and run every stage.

A stage module registers itself once, at its bottom:

    register_stage("quality", "legival quality --db DB", needs=("segment",), requires=("segment",),
                   build=quality_jobs, summarize=quality_summary)

- `needs`: the stages whose rows it reads. `stages_in_order()` sorts the registry topologically on
  them (ties by `order`, then name), so no list of stages is kept anywhere else; a report names the
  command of a missing input from it.
- `requires`: cheap stages that `run_stage` runs first, every time (steps before judge); each must
  be registered with a `standalone` stage (it takes no configuration).
- `build(ctx) -> list[Job]`: what a spec's run does for this stage, empty when its section is
  disabled (ingest: one job per teacher, transfer: one per (teacher, dataset, student) shard, the
  report: one, with the run's record). A `Job` is one Prefect task's worth: a label (the task run's
  name), what it runs on a store access, executor and progress, and the stage objects it would plan
  (`legival plan` counts their units).
- `summarize(results) -> dict`: the keys it adds to the run's summary (called even with no job, so
  the summary keeps one schema whatever ran).

Adding a stage is one module in this package (or a plugin module, `legival_core.registry`) and its
test: the flow runs its jobs after its `needs`, and the plan counts what it would compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from legival_core.registry import entries, entry, register
from legival_core.run_config import BenchmarkSpec, Teacher
from legival_core.stages.base import Executor, Progress, Stage, StoreAccess, Work, run_stage


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a registered stage's `build` reads: the spec, the teachers this run is restricted to (the
    per-teacher deployments; None: all), the report directory, and the run so far (`run`: started,
    spec_path, flow_run_id, ui_url, and `counts`, the summary of the stages already run)."""

    spec: BenchmarkSpec
    teachers: tuple[str, ...] | None = None
    out: Path | None = None
    run: Mapping[str, Any] = field(default_factory=dict)

    def chosen(self) -> list[Teacher]:
        return [self.spec.teacher(n) for n in self.teachers] if self.teachers else list(self.spec.teachers)


@dataclass(frozen=True, slots=True)
class Job:
    """One task of a stage in a run. `run(access, executor, progress)` returns the stage's summary;
    `stages` are what `legival plan` plans (their units counted); `release` names the engine pool
    (`Work.key`) to free once the job (or, for shards, every job of that pool) is done."""

    stage: str
    label: str
    run: Callable[[StoreAccess, Executor | None, Progress | None], Any]
    stages: tuple[Stage[Any, Any, Any], ...] = ()
    release: str | None = None


def stage_jobs(stage_name: str, label: str, stages: Sequence[Stage[Any, Any, Any]],
               release: str | None = None) -> Job:
    """A job that runs `stages` one after the other with `run_stage`; its result is the last summary."""
    chosen = tuple(stages)

    def run(access: StoreAccess, executor: Executor | None, progress: Progress | None) -> Any:
        out: Any = None
        for st in chosen:
            out = run_stage(st, access, executor, progress)
        return out

    return Job(stage_name, label, run, chosen, release)


def summary_dict(result: Any) -> dict[str, Any]:
    """A stage summary as a dict (`as_dict()`, a dataclass, or a dict)."""
    if result is None:
        return {}
    if isinstance(result, dict):
        return result
    as_dict = getattr(result, "as_dict", None)
    if callable(as_dict):
        d = as_dict()
        return dict(d) if isinstance(d, Mapping) else {"value": d}
    from dataclasses import asdict, is_dataclass

    return asdict(result) if is_dataclass(result) and not isinstance(result, type) else {"value": result}


def _by_name(name: str) -> Callable[[list[Any]], dict[str, Any]]:
    def summarize(results: list[Any]) -> dict[str, Any]:
        if not results:
            return {}
        return {name: summary_dict(results[0]) if len(results) == 1 else [summary_dict(r) for r in results]}

    return summarize


Retry = Literal["transient", "generation", "never"]


@dataclass(frozen=True, slots=True)
class StageInfo:
    """Registry metadata of a stage (module docstring)."""

    name: str
    command: str
    needs: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    build: Callable[[RunContext], list[Job]] | None = None
    summarize: Callable[[list[Any]], dict[str, Any]] | None = None
    order: int = 100
    """Tie-break of `stages_in_order` between stages whose `needs` allow either order (lower first)."""
    gpus: Callable[[BenchmarkSpec], float | None] | None = None
    """The stage's work may run on Ray actors: with this many GPUs each when set (the section's
    `num_gpus`), or on a Ray cluster; None: always in the driver's process."""
    shards: bool = False
    """The jobs are independent shards on the students' engine pools (transfer): the flow runs the
    jobs of one pool concurrently, releasing the pool before the next one loads."""
    retry: Retry = "transient"
    """Which failures Prefect retries: transient (network, a lost node), generation (also a
    teacher engine's start), never."""
    retries: int | None = 1
    """Prefect retries of a job's task; None: the spec's `execution.retries`."""
    retry_delay_s: float = 0.0
    standalone: Callable[[], Stage[Any, Any, Any]] | None = None
    """The stage built without configuration, for stages that name this one in `requires`."""
    prewarm: Callable[[RunContext], Work[Any, Any, Any] | None] | None = None
    """Asked as soon as every stage this one needs has run (before the stages ordered in between):
    the `Work` whose workers the flow starts now on Ray (the first student's engines), or None.
    `ctx.run["counts"]` is the summary so far."""
    artifacts: Callable[[list[Any]], dict[str, str]] | None = None
    """Markdown artifacts to publish from the jobs' results (kind -> markdown), e.g. the report's changes."""
    description: str = ""
    partial_inputs: bool = False
    """Runs even when a stage it needs failed as a whole (`stages.conditions.StageFailed`): it shows
    what is stored and why the rest is missing (the report; steps, which takes the lexical flags where
    the judge failed and is replanned when its flags come). Any other stage is then not run."""

    def jobs(self, ctx: RunContext) -> list[Job]:
        return self.build(ctx) if self.build is not None else []

    def summary(self, results: list[Any]) -> dict[str, Any]:
        return (self.summarize or _by_name(self.name))(results)


def register_stage(name: str, command: str, needs: tuple[str, ...] = (), *, requires: tuple[str, ...] = (),
                   build: Callable[[RunContext], list[Job]] | None = None,
                   summarize: Callable[[list[Any]], dict[str, Any]] | None = None, order: int = 100,
                   gpus: Callable[[BenchmarkSpec], float | None] | None = None, shards: bool = False,
                   retry: Retry = "transient", retries: int | None = 1, retry_delay_s: float = 0.0,
                   standalone: Callable[[], Stage[Any, Any, Any]] | None = None,
                   prewarm: Callable[[RunContext], Work[Any, Any, Any] | None] | None = None,
                   artifacts: Callable[[list[Any]], dict[str, str]] | None = None,
                   aliases: tuple[str, ...] = (), description: str = "", partial_inputs: bool = False) -> StageInfo:
    """Record a stage in the registry (module docstring). `aliases` are the names of its stage
    objects that differ from `name` (the judge's batch stages), so that `run_stage` finds its `requires`."""
    info = StageInfo(name, command, needs, requires, build, summarize, order, gpus, shards, retry, retries,
                     retry_delay_s, standalone, prewarm, artifacts, description, partial_inputs)
    register("stage", name, info, description=description, meta=info, aliases=aliases)
    return info


def stage_info(name: str) -> StageInfo:
    info: StageInfo = entry("stage", name).meta
    return info


def stages_in_order() -> list[StageInfo]:
    """Every registered stage in the order a run takes them (`in_needs_order`)."""
    return in_needs_order([e.meta for e in entries("stage")])


def stages_before(name: str) -> list[StageInfo]:
    """The stages `name` needs or requires, directly or through others, in run order (not itself)."""
    infos = {i.name: i for i in stages_in_order()}
    wanted: set[str] = set()
    todo = [name]
    while todo:
        current = infos[todo.pop()]
        for dep in (*current.needs, *current.requires):
            if dep not in wanted:
                wanted.add(dep)
                todo.append(dep)
    return [i for i in infos.values() if i.name in wanted]


def in_needs_order(stages: Sequence[StageInfo]) -> list[StageInfo]:
    """Each stage after the stages it needs or requires (Kahn's algorithm; of the stages ready, the
    lowest `order`, then name, first). A need on a stage not given, or a circle, is an error naming it."""
    infos = {i.name: i for i in stages}
    deps: dict[str, set[str]] = {}
    for n, info in infos.items():
        wanted = set(info.needs) | set(info.requires)
        unknown = sorted(d for d in wanted if d not in infos)
        if unknown:
            raise ValueError(f"stage {n!r} needs unregistered stage(s) {', '.join(unknown)}; "
                             f"registered: {', '.join(sorted(infos))}")
        deps[n] = wanted
    out: list[StageInfo] = []
    done: set[str] = set()
    while len(out) < len(infos):
        ready = [infos[n] for n in infos if n not in done and deps[n] <= done]
        if not ready:
            stuck = sorted(n for n in infos if n not in done)
            raise ValueError(f"the stages {', '.join(stuck)} need each other in a circle")
        first = min(ready, key=lambda i: (i.order, i.name))
        out.append(first)
        done.add(first.name)
    return out
