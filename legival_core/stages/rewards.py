"""The reward-model stage: score every trace that has no score yet, per reward model (section 5.3).

Rows go to `trace_metrics`: metric `rm:<name>` for a scalar RM, `rm:<name>:min|mean|last` for a PRM
(the per-step scores are kept in the `mean` row's detail). A model whose weights are not installed
gets `status = 'unavailable'` rows (value null), replaced by real scores once it can be loaded.

One `RewardsStage` per model: `plan` lists the traces without a score, `run` loads the model in
`Work.setup` and scores chunks without the store, `commit` writes one chunk in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.rewards.models import (
    PRM_AGGREGATES,
    RM_CODE_VERSION,
    RewardModelSpec,
    RewardModelUnavailable,
    Score,
    TraceInput,
    load_reward_model,
)
from legival_core.stages.base import (
    Executor,
    Plan,
    StoreAccess,
    Work,
    phase_progress,
    run_stage,
    store_access,
)
from legival_core.stages.registered import Job, RunContext, register_stage, stage_jobs
from legival_core.store import Store, writes
from legival_core.store import planner as reads
from legival_core.types import canonical_json

CODE_VERSION = RM_CODE_VERSION
Progress = Callable[[str, int, int], None]
"""progress(model name, done, total)."""
Loader = Callable[[RewardModelSpec], Any]
"""spec -> a loaded model with `score(traces) -> list[Score]` and `close()`; raises
`RewardModelUnavailable` when its weights are not here."""


@dataclass(slots=True)
class ModelSummary:
    name: str
    status: str = "ok"
    scored: int = 0
    truncated: int = 0
    dropped_tokens: int = 0
    reason: str | None = None


@dataclass(slots=True)
class RewardSummary:
    models: list[ModelSummary] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rm_models": [asdict(m) for m in self.models],
                "rm_scored": sum(m.scored for m in self.models),
                "rm_truncated": sum(m.truncated for m in self.models),
                "rm_unavailable": [m.name for m in self.models if m.status == "unavailable"]}


def metric_names(spec: RewardModelSpec) -> list[str]:
    return spec.metric_names()


def traces_to_score(store: Store, spec: RewardModelSpec, limit: int | None = None) -> list[TraceInput]:
    """Traces with no 'ok' row for this model at this version and parameters, in trace-id order."""
    rows = reads.traces_to_score(store, metric_names(spec)[0], canonical_json(spec.params()), CODE_VERSION, limit)
    return [TraceInput(*r) for r in rows]


def score_rows(spec: RewardModelSpec, scores: Sequence[Score]) -> list[dict[str, Any]]:
    params = canonical_json(spec.params())
    rows = []
    for s in scores:
        detail = {"n_tokens": s.n_tokens, "truncated": s.truncated, "dropped_tokens": s.dropped_tokens}
        if spec.kind == "scalar":
            rows.append(_row(s.trace_id, f"rm:{spec.name}", params, s.value, "scalar", "ok", detail))
            continue
        for agg in PRM_AGGREGATES:
            d = detail | ({"step_scores": list(s.step_scores)} if agg == "mean" else {})
            value = s.aggregate(agg)
            rows.append(_row(s.trace_id, f"rm:{spec.name}:{agg}", params, value, f"prm-{agg}",
                             "ok" if value is not None else "no_steps", d))
    return rows


def unavailable_rows(spec: RewardModelSpec, trace_ids: Sequence[str], reason: str) -> list[dict[str, Any]]:
    params = canonical_json(spec.params())
    return [_row(t, name, params, None, spec.kind, "unavailable", {"reason": reason})
            for t in trace_ids for name in metric_names(spec)]


@dataclass(frozen=True, slots=True)
class RewardBatch:
    """One chunk's rows; `unavailable` says why they are placeholders (the model is not here)."""

    trace_ids: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    truncated: int = 0
    dropped_tokens: int = 0
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class Unloadable:
    reason: str


@dataclass(frozen=True, slots=True)
class LoadModel:
    """`Work.setup`: the reward model, loaded once per worker, or why it cannot be."""

    spec: RewardModelSpec
    loader: Loader = load_reward_model

    def __call__(self) -> Any:
        try:
            return self.loader(self.spec)
        except RewardModelUnavailable as e:
            return Unloadable(str(e))


@dataclass(frozen=True, slots=True)
class ScoreTraces:
    """`Work.process`: score one chunk of traces (placeholder rows when the model is unavailable)."""

    spec: RewardModelSpec

    def __call__(self, model: Any, part: Sequence[TraceInput]) -> list[RewardBatch]:
        ids = tuple(t.trace_id for t in part)
        if isinstance(model, Unloadable):
            return [RewardBatch(ids, tuple(unavailable_rows(self.spec, ids, model.reason)), unavailable=model.reason)]
        scores = model.score(part)
        return [RewardBatch(ids, tuple(score_rows(self.spec, scores)), sum(s.truncated for s in scores),
                            sum(s.dropped_tokens for s in scores))]


def close_model(model: Any) -> None:
    if not isinstance(model, Unloadable):
        model.close()


@dataclass(frozen=True, slots=True)
class RewardsStage:
    """One reward model on the traces (the first `limit` in trace-id order) it has not scored."""

    spec: RewardModelSpec
    limit: int | None = None
    chunk: int = 64
    loader: Loader = load_reward_model
    name: str = "rewards"

    @property
    def unit_scope(self) -> str:
        """Failed units are recorded per name (`isolation.failure_stage`)."""
        return str(self.spec.name)

    @property
    def work_key(self) -> str:
        """Its workers' key: a Ray executor keeps one pool of engines per reward model."""
        return f"rewards:{self.spec.name}"

    def plan(self, store: Store) -> Plan[TraceInput, ModelSummary]:
        todo = traces_to_score(store, self.spec, self.limit)
        return Plan(todo, ModelSummary(self.spec.name), total=len(todo))

    def run(self, units: Sequence[TraceInput], executor: Executor) -> Iterator[list[RewardBatch]]:
        work = Work(LoadModel(self.spec, self.loader), ScoreTraces(self.spec), self.chunk, teardown=close_model,
                    key=self.work_key)
        return executor.run(work, units)

    def commit(self, store: Store, results: Sequence[RewardBatch], plan: Plan[Any, ModelSummary]) -> int:
        ms = plan.summary
        done = 0
        for b in results:
            if b.unavailable is not None:
                ms.status, ms.reason = "unavailable", b.unavailable
                writes.add(store, "trace_metrics", b.rows)
            else:
                # Scores replace earlier 'unavailable' / 'no_steps' rows of the same traces.
                writes.replace_metric_rows(store, b.rows, metric_names(self.spec), canonical_json(self.spec.params()),
                                           CODE_VERSION, b.trace_ids)
                ms.scored += len(b.trace_ids)
                ms.truncated += b.truncated
                ms.dropped_tokens += b.dropped_tokens
            done += len(b.trace_ids)
        return done


def run_rewards(
    store: Store | StoreAccess,
    specs: Sequence[RewardModelSpec],
    limit: int | None = None,
    chunk: int = 64,
    loader: Loader = load_reward_model,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> RewardSummary:
    """Every reward model in `specs` on the traces it has not scored: what `legival rm` runs."""
    access = store_access(store) if isinstance(store, Store) else store
    summary = RewardSummary()
    for spec in specs:
        stage = RewardsStage(spec, limit, chunk, loader)
        report = phase_progress(progress, spec.name, when=lambda done, _total: done > 0)
        summary.models.append(run_stage(stage, access, executor, report))
    return summary


def _row(trace_id: str, metric: str, params: str, value: float | None, method: str, status: str,
         detail: dict[str, Any]) -> dict[str, Any]:
    return {"trace_id": trace_id, "metric": metric, "params": params, "code_version": CODE_VERSION,
            "value": value, "method": method, "status": status, "detail": json.dumps(detail)}


def _rewards_jobs(ctx: RunContext) -> list[Job]:
    """One job per reward model, one after the other (on a cluster each model's actors are released
    before the next model loads); an uninstalled model stores `unavailable` rows with the reason."""
    config = ctx.spec.rewards
    if not config.enabled:
        return []
    out = []
    for spec in config.specs():
        stage = RewardsStage(spec, config.limit)
        out.append(stage_jobs("rewards", f"rewards {spec.name}", [stage], release=stage.work_key))
    return out


def _rewards_summary(results: list[Any]) -> dict[str, Any]:
    return {"rewards": RewardSummary(list(results)).as_dict()} if results else {}


register_stage("rewards", "legival rm --db DB", needs=("ingest", "generate"), build=_rewards_jobs,
               summarize=_rewards_summary, gpus=lambda spec: spec.rewards.num_gpus, order=90,
               description="reward-model scores of every trace (paper section 5.3)")
