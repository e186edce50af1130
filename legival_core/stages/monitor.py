"""The monitorability stage (issue 7, part 3): build the clean, sabotage and natural sets, ask the
supervisor about each item that has no stored verdict, and store the verdicts.

Sets per (teacher, dataset), the first `limit` traces by (problem_id, trace_id) when limited:
clean = correct, untruncated traces with at least one step (label: correct); sabotage = each clean
trace with one injected error (`legival_core.monitor.sabotage`; label: incorrect); natural = the
teacher's own wrong, untruncated traces on problems another teacher solved (label: incorrect).
Verdicts are keyed by (supervisor, condition, trace, text), so a rerun asks nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from legival_core.backends.base import TextBackend
from legival_core.monitor.sabotage import inject_error
from legival_core.monitor.supervisor import PROMPT_VERSION, supervise, supervisor_key
from legival_core.segment import sentence_spans
from legival_core.store import Store
from legival_core.types import content_hash

if TYPE_CHECKING:
    import polars as pl

COLUMNS = ("item_key", "supervisor_key", "supervisor", "trace_id", "teacher", "dataset", "problem_id",
           "condition", "label_incorrect", "predicted_incorrect", "status", "sabotage_kind", "sabotage_step",
           "detail", "response", "prompt_tokens")
Progress = Callable[[int, int], None]


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_items(store: Store, seed: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """Every item (without verdict): clean, sabotage and natural sets, in a stable order."""
    import polars as pl

    from legival_core.reports.tables import current_graders

    graders = current_graders(store)
    store.con.register("_mg", graders.to_arrow())
    try:
        t = store.query(
            "SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text, t.truncated, "
            "p.question, coalesce(g.correct, false) AS correct FROM traces t "
            "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
            "JOIN _mg cg ON cg.dataset = t.dataset "
            "LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader "
            "ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id")
    finally:
        store.con.unregister("_mg")
    solvers = t.filter(pl.col("correct")).group_by("dataset", "problem_id").agg(pl.col("teacher").unique().alias("_s"))
    t = t.join(solvers, on=["dataset", "problem_id"], how="left")
    items: list[dict[str, Any]] = []

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
          detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"trace_id": r["trace_id"], "teacher": r["teacher"], "dataset": r["dataset"],
            "problem_id": r["problem_id"], "question": r["question"], "answer_text": r["answer_text"],
            "text": text, "condition": condition, "label_incorrect": condition != "clean",
            "sabotage_kind": kind, "sabotage_step": step, "detail": json.dumps(detail) if detail else None}


def run_monitor(store: Store, backend: TextBackend, supervisor: str, seed: int = 0, limit: int | None = None,
                max_new_tokens: int = 8, batch_size: int = 16, progress: Progress | None = None) -> MonitorSummary:

    items = build_items(store, seed, limit)
    skey = supervisor_key(backend.model_id, max_new_tokens)
    s = MonitorSummary(supervisor, skey, items=len(items))
    for it in items:
        it["item_key"] = content_hash(skey, PROMPT_VERSION, it["condition"], it["trace_id"], it["text"])
        s.clean += it["condition"] == "clean"
        s.sabotage += it["condition"] == "sabotage"
        s.natural += it["condition"] == "natural"
    known = set(store.query("SELECT item_key FROM monitor_results WHERE supervisor_key = ?", [skey])["item_key"].to_list())
    todo = [it for it in items if it["item_key"] not in known]
    s.cached = len(items) - len(todo)
    for start in range(0, len(todo), batch_size):
        part = todo[start : start + batch_size]
        verdicts = supervise(backend, [(it["question"], it["text"], it["answer_text"]) for it in part], max_new_tokens)
        rows = []
        for it, v in zip(part, verdicts, strict=True):
            s.overflow += v.status == "overflow"
            s.unparsed += v.status == "unparsed"
            rows.append({**{c: it.get(c) for c in COLUMNS}, "supervisor_key": skey, "supervisor": supervisor,
                         "predicted_incorrect": v.predicted_incorrect, "status": v.status, "response": v.response,
                         "prompt_tokens": v.prompt_tokens})
        store.insert_rows("monitor_results", [{c: r.get(c) for c in COLUMNS} for r in rows])
        s.asked += len(part)
        if progress:
            progress(s.asked, len(todo))
    return s
