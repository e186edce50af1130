"""The efficiency stage: compute what the store is missing, and nothing else (SPEC section 3).

Three passes, each keyed so a rerun does no work: (1) segment traces that have no steps for the
current segmenter; (2) token length, step length and lexical backtracking for traces without those
metric rows at the current code version; (3) redundancy: embed the steps of every trace that has no
stored similarities for the embedding model, in ONE batched call across traces, store r_i per step,
and derive the redundancy row for the requested tau from the stored r_i (a new tau needs no model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from legival_core.embed import DEFAULT_MODEL, embed
from legival_core.metrics.efficiency import (
    DEFAULT_TAU,
    LEXICAL_BACKTRACKING_VERSION,
    REDUNDANCY_VERSION,
    STEP_LEN_VERSION,
    TOKEN_LEN_VERSION,
    lexical_backtracking_steps,
    max_prev_similarity,
    redundancy,
)
from legival_core.segment import SEGMENTER_VERSION, sentence_spans
from legival_core.store import Store
from legival_core.tokens import ENCODING_NAME, token_lens
from legival_core.types import Span, Steps, canonical_json

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total)."""


@dataclass(slots=True)
class EfficiencySummary:
    segmented: int = 0
    length_rows: int = 0
    embedded_traces: int = 0
    embedded_sentences: int = 0
    redundancy_rows: int = 0
    embed_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def redundancy_params(tau: float, model: str) -> str:
    return canonical_json({"model": model, "segmenter": SEGMENTER_VERSION, "tau": tau})


def compute_efficiency(
    store: Store,
    tau: float = DEFAULT_TAU,
    model: str = DEFAULT_MODEL,
    progress: Progress | None = None,
    chunk_traces: int = 1000,
) -> EfficiencySummary:
    s = EfficiencySummary()
    s.segmented = segment_missing(store)
    s.length_rows = _lengths_missing(store)
    _redundancy_missing(store, tau, model, s, progress, chunk_traces)
    return s


def segment_missing(store: Store) -> int:
    """Segment every trace that has no steps for the current segmenter; returns how many."""
    todo = store.traces_missing_steps(SEGMENTER_VERSION)
    if todo.height == 0:
        return 0
    steps: list[dict[str, Any]] = []
    counts: list[dict[str, Any]] = []
    for tid, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
        spans = sentence_spans(text)
        counts.append({"trace_id": tid, "segmenter": SEGMENTER_VERSION, "m": len(spans)})
        steps.extend(
            {"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": i, "start_char": sp.start, "end_char": sp.end}
            for i, sp in enumerate(spans, start=1)
        )
    with store.transaction():
        store.insert_rows("steps", steps)
        store.insert_rows("step_counts", counts)
    return todo.height


def _lengths_missing(store: Store) -> int:
    tok_params = canonical_json({"encoding": ENCODING_NAME})
    seg_params = canonical_json({"segmenter": SEGMENTER_VERSION})
    rows: list[dict[str, Any]] = []

    todo = store.traces_missing_metric("token_len", tok_params, TOKEN_LEN_VERSION)
    if todo.height:
        for tid, n in zip(todo["trace_id"], token_lens(todo["reasoning"].to_list()), strict=True):
            rows.append(_metric_row(tid, "token_len", tok_params, TOKEN_LEN_VERSION, n, ENCODING_NAME))

    for metric, version in (("step_len", STEP_LEN_VERSION), ("backtracking", LEXICAL_BACKTRACKING_VERSION)):
        todo = store.traces_missing_metric(metric, seg_params, version)
        if not todo.height:
            continue
        spans = store.step_spans(todo["trace_id"].to_list(), SEGMENTER_VERSION)
        for tid, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
            steps = Steps(text, tuple(Span(a, b) for a, b in spans[tid]))
            if metric == "step_len":
                rows.append(_metric_row(tid, metric, seg_params, version, steps.m, "punkt"))
            else:
                flagged = lexical_backtracking_steps(steps)
                value = len(flagged) / steps.m if steps.m else 0.0
                rows.append(_metric_row(tid, metric, seg_params, version, value, "lexical",
                                        canonical_json({"steps": list(flagged)})))
    with store.transaction():
        store.insert_rows("trace_metrics", rows)
    return len(rows)


def _redundancy_missing(
    store: Store, tau: float, model: str, s: EfficiencySummary, progress: Progress | None, chunk: int
) -> None:
    import time

    params = redundancy_params(tau, model)
    todo = store.traces_missing_metric("redundancy", params, REDUNDANCY_VERSION)
    if todo.height == 0:
        return
    ids = todo["trace_id"].to_list()
    texts = dict(zip(ids, todo["reasoning"].to_list(), strict=True))
    spans = store.step_spans(ids, SEGMENTER_VERSION)
    known = store.max_prev_similarities(ids, model, SEGMENTER_VERSION)
    need = [t for t in ids if t not in known and len(spans[t]) >= 2]
    total = len(need)
    done = 0
    if progress:
        progress("embed", 0, total)
    # Chunks bound memory and let each chunk commit: a crash loses at most one chunk of work.
    for start in range(0, total, chunk):
        part = need[start : start + chunk]
        sentences = [texts[t][a:b] for t in part for a, b in spans[t]]
        t0 = time.perf_counter()
        emb = embed(sentences, model)
        s.embed_seconds += time.perf_counter() - t0
        s.embedded_sentences += len(sentences)
        sim_rows: list[dict[str, Any]] = []
        offset = 0
        for t in part:
            m = len(spans[t])
            r = max_prev_similarity(emb[offset : offset + m].copy())
            offset += m
            known[t] = r
            sim_rows.extend(
                {"trace_id": t, "model": model, "segmenter": SEGMENTER_VERSION, "idx": i, "max_prev_cos": v}
                for i, v in enumerate(r, start=2)
            )
        with store.transaction():
            store.insert_rows("step_similarity", sim_rows)
        done += len(part)
        s.embedded_traces += len(part)
        if progress:
            progress("embed", done, total)
    rows = [_metric_row(t, "redundancy", params, REDUNDANCY_VERSION, redundancy(known.get(t, []), tau), model)
            for t in ids]
    with store.transaction():
        s.redundancy_rows = store.insert_rows("trace_metrics", rows).inserted


def _metric_row(
    trace_id: str, metric: str, params: str, version: str, value: float, method: str, detail: str | None = None
) -> dict[str, Any]:
    return {"trace_id": trace_id, "metric": metric, "params": params, "code_version": version,
            "value": float(value), "method": method, "status": "ok", "detail": detail}
