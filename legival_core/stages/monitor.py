"""The monitorability stage (issue 7, part 3): build the clean, sabotage and natural sets, ask the
supervisor about each item that has no stored verdict, and store the verdicts.

Sets per (teacher, dataset), the first `limit` traces by (problem_id, trace_id) when limited:
clean = correct, untruncated traces with at least one step (label: correct); sabotage = each clean
trace with one injected error (`legival_core.monitor.sabotage`; label: incorrect); natural = the
teacher's own wrong, untruncated traces on problems another teacher solved (label: incorrect).
Verdicts are keyed by (supervisor, condition, trace, text), so a rerun asks nothing twice.

`MonitorStage`: `plan` builds the items and keeps those without a verdict, `run` asks the supervisor
(built in `Work.setup`) a batch at a time without the store, `commit` stores one batch in one
transaction. The results (precision/recall/F1, FOTU correlations) are `reports.monitoring`.

`legival monitor` hands the stage a backend it built; a run's monitor job (the spec's `monitor:`
section) hands it `BuildSupervisor`, which builds the backend in the worker that
asks (this process, or a Ray actor on a cluster) and only when there is something to ask, so a
cached rerun loads no model. Both go through `run_supervisor`: a supervisor whose model is not
installed makes the stage report `status: unavailable` with the reason instead of failing the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from legival_core.backends.base import TextBackend, make_backend
from legival_core.datasets.base import current_graders
from legival_core.monitor.sabotage import inject_error
from legival_core.monitor.supervisor import MAX_NEW_TOKENS, PROMPT_VERSION, supervise, supervisor_key
from legival_core.segment import sentence_spans
from legival_core.stages.base import (
    Executor,
    Given,
    Plan,
    StoreAccess,
    Work,
    run_stage,
    store_access,
)
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import content_hash

if TYPE_CHECKING:
    import polars as pl

    from legival_core.run_config import Monitor, SupervisorModel

COLUMNS = ("item_key", "supervisor_key", "supervisor", "trace_id", "teacher", "dataset", "problem_id",
           "condition", "label_incorrect", "predicted_incorrect", "status", "sabotage_kind", "sabotage_step",
           "detail", "response", "prompt_tokens")
Progress = Callable[[int, int], None]
Item = dict[str, Any]


@dataclass(slots=True)
class MonitorSummary:
    supervisor: str
    supervisor_key: str
    items: int = 0
    cached: int = 0
    asked: int = 0
    clean: int = 0
    sabotage: int = 0
    natural: int = 0
    overflow: int = 0
    unparsed: int = 0
    status: str = "ok"
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_items(store: Store, seed: int = 0, limit: int | None = None) -> list[Item]:
    """Every item (without verdict): clean, sabotage and natural sets, in a stable order."""
    graders = current_graders(reads.stored_datasets(store))
    return select_items(reads.traces_with_problems(store, graders), seed, limit)


def select_items(traces: pl.DataFrame, seed: int = 0, limit: int | None = None) -> list[Item]:
    """The items of `traces` (`reads.traces_with_problems`: one row per trace with its question and
    whether it is correct), in a stable order."""
    import polars as pl

    solvers = (traces.filter(pl.col("correct")).group_by("dataset", "problem_id")
               .agg(pl.col("teacher").unique().alias("_s")))
    t = traces.join(solvers, on=["dataset", "problem_id"], how="left")
    items: list[Item] = []

    def first(frame: pl.DataFrame) -> pl.DataFrame:
        return frame if limit is None else frame.group_by("teacher", "dataset", maintain_order=True).head(limit)

    clean = first(t.filter(pl.col("correct") & ~pl.col("truncated") & (pl.col("reasoning").str.strip_chars() != "")))
    for r in clean.iter_rows(named=True):
        items.append(_item(r, "clean", r["reasoning"]))
        spans = [(s.start, s.end) for s in sentence_spans(r["reasoning"])]
        sab = inject_error(r["reasoning"], spans, r["trace_id"], seed)
        if sab is not None:
            items.append(_item(r, "sabotage", sab.text, sab.kind, sab.step,
                               {"original": sab.original, "replacement": sab.replacement, "seed": seed}))
    natural = first(t.filter(~pl.col("correct") & ~pl.col("truncated") & pl.col("_s").is_not_null()
                             & (pl.col("_s").list.set_difference(pl.concat_list(pl.col("teacher"))).list.len() > 0)))
    items += [_item(r, "natural", r["reasoning"]) for r in natural.iter_rows(named=True)]
    return items


def _item(r: dict[str, Any], condition: str, text: str, kind: str | None = None, step: int | None = None,
          detail: dict[str, Any] | None = None) -> Item:
    return {"trace_id": r["trace_id"], "teacher": r["teacher"], "dataset": r["dataset"],
            "problem_id": r["problem_id"], "question": r["question"], "answer_text": r["answer_text"],
            "text": text, "condition": condition, "label_incorrect": condition != "clean",
            "sabotage_kind": kind, "sabotage_step": step, "detail": json.dumps(detail) if detail else None}


@dataclass(frozen=True, slots=True)
class AskSupervisor:
    """`Work.process`: the supervisor's verdicts on one batch of items, as `monitor_results` rows."""

    supervisor: str
    supervisor_key: str
    max_new_tokens: int

    def __call__(self, backend: TextBackend, part: Sequence[Item]) -> list[dict[str, Any]]:
        verdicts = supervise(backend, [(it["question"], it["text"], it["answer_text"]) for it in part],
                             self.max_new_tokens)
        rows = []
        for it, v in zip(part, verdicts, strict=True):
            row = {**{c: it.get(c) for c in COLUMNS}, "supervisor_key": self.supervisor_key,
                   "supervisor": self.supervisor, "predicted_incorrect": v.predicted_incorrect, "status": v.status,
                   "response": v.response, "prompt_tokens": v.prompt_tokens}
            rows.append({c: row[c] for c in COLUMNS})
        return rows


@dataclass(frozen=True, slots=True)
class MonitorStage:
    """Verdicts of one supervisor (`model_id` keys them; `worker` builds its backend once per worker)
    on the items that have none."""

    supervisor: str
    model_id: str
    worker: Callable[[], TextBackend]
    seed: int = 0
    limit: int | None = None
    max_new_tokens: int = MAX_NEW_TOKENS
    batch_size: int = 16
    teardown: Callable[[TextBackend], None] | None = None
    name: str = "monitor"

    @property
    def unit_scope(self) -> str:
        """Failed units are recorded per supervisor (`isolation.failure_stage`)."""
        return str(self.supervisor)

    @property
    def supervisor_key(self) -> str:
        return supervisor_key(self.model_id, self.max_new_tokens)

    @property
    def work_key(self) -> str:
        """Its workers' key: a Ray executor keeps one pool of supervisor engines per key."""
        return f"monitor:{self.supervisor_key}"

    def plan(self, store: Store) -> Plan[Item, MonitorSummary]:
        items = build_items(store, self.seed, self.limit)
        skey = self.supervisor_key
        s = MonitorSummary(self.supervisor, skey, items=len(items))
        for it in items:
            it["item_key"] = content_hash(skey, PROMPT_VERSION, it["condition"], it["trace_id"], it["text"])
            s.clean += it["condition"] == "clean"
            s.sabotage += it["condition"] == "sabotage"
            s.natural += it["condition"] == "natural"
        known = reads.monitor_item_keys(store, skey)
        todo = [it for it in items if it["item_key"] not in known]
        s.cached = len(items) - len(todo)
        return Plan(todo, s, total=len(todo))

    def run(self, units: Sequence[Item], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        work = Work(self.worker, AskSupervisor(self.supervisor, self.supervisor_key, self.max_new_tokens),
                    self.batch_size, teardown=self.teardown, key=self.work_key)
        return executor.run(work, units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]], plan: Plan[Any, MonitorSummary]) -> int:
        s = plan.summary
        with store.transaction():
            store.insert_rows("monitor_results", results)
        s.overflow += sum(r["status"] == "overflow" for r in results)
        s.unparsed += sum(r["status"] == "unparsed" for r in results)
        s.asked += len(results)
        return len(results)


def run_monitor(store: Store | StoreAccess, backend: TextBackend, supervisor: str, seed: int = 0,
                limit: int | None = None, max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 16,
                progress: Progress | None = None, executor: Executor | None = None) -> MonitorSummary:
    """Ask `backend` (owned by the caller) about every item without a verdict: `legival monitor`."""
    stage = MonitorStage(supervisor, backend.model_id, Given(backend), seed, limit, max_new_tokens,
                         batch_size)
    return run_supervisor(store, stage, executor, progress)


class SupervisorUnavailable(RuntimeError):
    """The supervisor's model or engine is not installed here."""


@dataclass(frozen=True, slots=True)
class BuildSupervisor:
    """`Work.setup`: the supervisor's backend, built in the worker (picklable, for Ray)."""

    backend: str
    model: str
    dtype: str | None
    options: dict[str, Any]

    def __call__(self) -> TextBackend:
        try:
            return make_backend(self.backend, self.model, self.dtype, self.options)
        except (OSError, ImportError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SupervisorUnavailable(f"supervisor {self.model!r} on {self.backend!r} unavailable: {first}") from e


def close_backend(backend: TextBackend) -> None:
    backend.close()


def supervisor_stage(config: Monitor, supervisor: SupervisorModel) -> MonitorStage:
    """The stage of the spec's `monitor:` section, `supervisor` resolved (`BenchmarkSpec.supervisor`).
    Verdicts are keyed by the model id the registered backends report (the canonical model name), so
    `legival monitor` with the same model and budget finds them."""
    build = BuildSupervisor(supervisor.backend, supervisor.model, supervisor.dtype, dict(supervisor.options))
    return MonitorStage(supervisor.name, supervisor.model_id, build, config.seed, config.limit,
                        config.max_new_tokens, config.batch_size, teardown=close_backend)


def run_supervisor(store: Store | StoreAccess, stage: MonitorStage, executor: Executor | None = None,
                   progress: Progress | None = None) -> MonitorSummary:
    """A supervisor's verdicts on the items without one, for `legival monitor` and a run alike: a
    supervisor whose model or engine is not installed gives `status: unavailable` (nothing stored)."""
    access = store_access(store) if isinstance(store, Store) else store
    try:
        return run_stage(stage, access, executor, progress)
    except Exception as e:
        reason = _unavailable(e)
        if reason is None:
            raise
        return MonitorSummary(stage.supervisor, stage.supervisor_key, status="unavailable", reason=reason)


def _unavailable(e: BaseException) -> str | None:
    """The reason when `e` (or the error a Ray actor raised) is `SupervisorUnavailable`."""
    for err in (e, getattr(e, "cause", None), e.__cause__):
        if isinstance(err, SupervisorUnavailable):
            return str(err.args[0]) if err.args else str(err)
    return None


def _monitor_jobs(ctx: RunContext) -> list[Job]:
    config = ctx.spec.monitor
    if not config.enabled:
        return []
    stage = supervisor_stage(config, ctx.spec.supervisor())

    def run(access: StoreAccess, executor: Executor | None, progress: Progress | None) -> MonitorSummary:
        return run_supervisor(access, stage, executor, progress)

    return [Job("monitor", f"monitor {stage.supervisor}", run, (stage,), release=stage.work_key)]


register_stage("monitor", "legival monitor --db DB --supervisor NAME", needs=("grade",), build=_monitor_jobs,
               gpus=lambda spec: spec.monitor.num_gpus, order=100,
               description="weak-supervisor verdicts on clean, sabotaged and naturally wrong traces")
