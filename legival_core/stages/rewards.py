"""The reward-model stage: score every trace that has no score yet, per reward model (section 5.3).

Rows go to `trace_metrics`: metric `rm:<name>` for a scalar RM, `rm:<name>:min|mean|last` for a PRM
(the per-step scores are kept in the `mean` row's detail). A model whose weights are not installed
gets `status = 'unavailable'` rows (value null), replaced by real scores once it can be loaded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.rewards.models import (
    PRM_AGGREGATES,
    RewardModelSpec,
    RewardModelUnavailable,
    Score,
    TraceInput,
    load_reward_model,
)
from legival_core.store import Store
from legival_core.types import canonical_json

CODE_VERSION = "rm-1"
Progress = Callable[[str, int, int], None]


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
    base = f"rm:{spec.name}"
    return [f"{base}:{a}" for a in PRM_AGGREGATES] if spec.kind == "prm" else [base]


def traces_to_score(store: Store, spec: RewardModelSpec, limit: int | None = None) -> list[TraceInput]:
    """Traces with no 'ok' row for this model at this version and parameters, in trace-id order."""
    frame = store.query(
        "SELECT t.trace_id, p.question, t.reasoning, t.answer_text FROM traces t "
        "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
        "WHERE NOT EXISTS (SELECT 1 FROM trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? "
        "AND x.params = ? AND x.code_version = ? AND x.status IN ('ok', 'no_steps')) ORDER BY t.trace_id"
        + (" LIMIT ?" if limit is not None else ""),
        [metric_names(spec)[0], canonical_json(spec.params()), CODE_VERSION, *([limit] if limit is not None else [])],
    )
    return [TraceInput(*r) for r in frame.iter_rows()]


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


def run_rewards(
    store: Store,
    specs: Sequence[RewardModelSpec],
    limit: int | None = None,
    chunk: int = 64,
    loader: Callable[[RewardModelSpec], Any] = load_reward_model,
    progress: Progress | None = None,
) -> RewardSummary:
    summary = RewardSummary()
    for spec in specs:
        ms = ModelSummary(spec.name)
        summary.models.append(ms)
        todo = traces_to_score(store, spec, limit)
        if not todo:
            continue
        try:
            model = loader(spec)
        except RewardModelUnavailable as e:
            ms.status, ms.reason = "unavailable", str(e)
            params = canonical_json(spec.params())
            rows = [_row(t.trace_id, name, params, None, spec.kind, "unavailable", {"reason": str(e)})
                    for t in todo for name in metric_names(spec)]
            with store.transaction():
                store.insert_rows("trace_metrics", rows)
            continue
        try:
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                scores = model.score(part)
                ms.scored += len(scores)
                ms.truncated += sum(s.truncated for s in scores)
                ms.dropped_tokens += sum(s.dropped_tokens for s in scores)
                _replace(store, spec, [t.trace_id for t in part], score_rows(spec, scores))
                if progress:
                    progress(spec.name, start + len(part), len(todo))
        finally:
            model.close()
    return summary


def _replace(store: Store, spec: RewardModelSpec, trace_ids: list[str], rows: list[dict[str, Any]]) -> None:
    """Insert scores, replacing earlier 'unavailable'/'no_steps' rows of the same traces."""
    with store.transaction():
        store.run(
            "DELETE FROM trace_metrics WHERE list_contains(?, metric) AND params = ? AND code_version = ? "
            "AND status <> 'ok' AND list_contains(?, trace_id)",
            [metric_names(spec), canonical_json(spec.params()), CODE_VERSION, trace_ids],
        )
        store.insert_rows("trace_metrics", rows)


def _row(trace_id: str, metric: str, params: str, value: float | None, method: str, status: str,
         detail: dict[str, Any]) -> dict[str, Any]:
    return {"trace_id": trace_id, "metric": metric, "params": params, "code_version": CODE_VERSION,
            "value": value, "method": method, "status": status, "detail": json.dumps(detail)}
