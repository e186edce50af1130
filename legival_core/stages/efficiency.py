"""The segment and efficiency stages: steps, and every registered per-trace efficiency metric (SPEC
section 3), computed for the traces that lack them and nothing else.

Segmentation stores the Punkt steps of every trace that has none (other stages require it). The
efficiency stage computes, per trace, the registered `TraceMetric`s with a `compute` function
(token length, step length, lexical backtracking, and any metric module added to
`legival_core/metrics/`) and redundancy: the steps of every trace without stored similarities are
embedded in ONE batched call per chunk of traces, r_i is stored per step, and the redundancy row for
the requested tau is derived from the stored r_i (a new tau needs no model). Each chunk commits in
one transaction, so a crash loses at most one chunk and a rerun computes nothing.

Embeddings go through the shared cache (`legival_core.embed`): `plan` reads the stored vectors of the
sentences to embed, `run` embeds only the others (each distinct sentence once, on the spec's backend;
the worker is a Ray actor when the executor is the Ray pool, with the spec's `num_gpus`), and
`commit` stores the new vectors, which cohesion (same model) then reuses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from legival_core.embed import Embedder, embedding_key, sentence_hash
from legival_core.metrics.base import MetricValue, TraceText, stored_trace_metrics
from legival_core.metrics.redundancy import REDUNDANCY, max_prev_similarity, redundancy, similarity_model
from legival_core.run_config import Efficiency
from legival_core.segment import SEGMENTER_VERSION, sentence_spans
from legival_core.stages.base import Executor, Plan, StoreAccess, Work, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import Span, Steps, canonical_json

# ------------------------------------------------------------------------------------------ segment


@dataclass(slots=True)
class SegmentSummary:
    segmented: int = 0


@dataclass(frozen=True, slots=True)
class SegmentStage:
    """Store the steps of the traces that have none for the current segmenter."""

    name: str = "segment"
    chunk: int = 5000

    def plan(self, store: Store) -> Plan[tuple[str, str], SegmentSummary]:
        todo = reads.traces_missing_steps(store, SEGMENTER_VERSION)
        units = list(zip(todo["trace_id"].to_list(), todo["reasoning"].to_list(), strict=True))
        return Plan(units, SegmentSummary(), total=len(units))

    def run(self, units: Sequence[tuple[str, str]], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        return executor.run(Work(_no_worker, _segment_chunk, self.chunk), units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]], plan: Plan[Any, SegmentSummary]) -> int:
        with store.transaction():  # one insert per table: one per trace took 5 s for 2,294 traces
            store.insert_rows("steps", [step for r in results for step in r["steps"]])
            store.insert_rows("step_counts", [r["count"] for r in results])
        plan.summary.segmented += len(results)
        return len(results)


def _no_worker() -> None:
    return None


def _segment_chunk(_w: None, units: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    out = []
    for tid, text in units:
        spans = sentence_spans(text)
        out.append({
            "count": {"trace_id": tid, "segmenter": SEGMENTER_VERSION, "m": len(spans)},
            "steps": [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": i, "start_char": sp.start,
                       "end_char": sp.end} for i, sp in enumerate(spans, start=1)],
        })
    return out


# ---------------------------------------------------------------------------------------- efficiency


@dataclass(slots=True)
class EfficiencySummary:
    segmented: int = 0
    length_rows: int = 0
    embedded_traces: int = 0
    embedded_sentences: int = 0
    """Steps of the traces whose r_i were computed."""
    encoded_sentences: int = 0
    """Distinct sentences sent through the model (the rest came from the cache or were repeats)."""
    cached_sentences: int = 0
    """Distinct sentences whose vectors came from the embedding cache."""
    redundancy_rows: int = 0
    embed_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EfficiencyUnit:
    """One trace: its text and steps, the metrics it lacks, and its stored r_i (None: embed it)."""

    trace_id: str
    reasoning: str
    spans: tuple[tuple[int, int], ...]
    metrics: tuple[str, ...]
    redundancy: bool
    known_r: tuple[float, ...] | None
    cached: tuple[tuple[str, bytes], ...] = ()
    """(sentence hash, stored vector) of its sentences found in the embedding cache."""


@dataclass(frozen=True, slots=True)
class EfficiencyResult:
    trace_id: str
    metric_rows: tuple[dict[str, Any], ...]
    similarity_rows: tuple[dict[str, Any], ...]
    embedded_sentences: int
    embed_seconds: float
    embeddings: tuple[dict[str, Any], ...] = ()
    """`sentence_embeddings` rows of the vectors first computed for this trace."""
    encoded: int = 0
    reused: int = 0


@dataclass(frozen=True, slots=True)
class EfficiencyStage:
    config: Efficiency
    chunk: int = 1000
    """Traces per chunk: bounds memory, batches the embedding call, and is the commit unit."""
    name: str = "efficiency"

    def plan(self, store: Store) -> Plan[EfficiencyUnit, EfficiencySummary]:
        missing: dict[str, dict[str, Any]] = {}
        for tm in stored_trace_metrics("efficiency"):
            todo = reads.traces_missing_metric(store, tm.name, canonical_json(tm.params(self.config)), tm.version)
            for tid, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
                missing.setdefault(tid, {"text": text, "metrics": []})["metrics"].append(tm.name)
        ids = list(missing)
        spans = reads.step_spans(store, ids, SEGMENTER_VERSION)
        red = [t for t in ids if REDUNDANCY.name in missing[t]["metrics"]]
        known = reads.max_prev_similarities(store, red, similarity_model(self.config), SEGMENTER_VERSION)
        embed = {t: [sentence_hash(missing[t]["text"][a:b]) for a, b in spans[t]]
                 for t in red if t not in known and len(spans[t]) >= 2}
        cache = reads.cached_embeddings(store, embedding_key(self.config.model, self.config.embed_precision),
                                        list({h for hs in embed.values() for h in hs}))
        units = [
            EfficiencyUnit(
                t, missing[t]["text"], tuple(spans[t]),
                tuple(m for m in missing[t]["metrics"] if m != REDUNDANCY.name),
                REDUNDANCY.name in missing[t]["metrics"],
                tuple(known[t]) if t in known else (() if len(spans[t]) < 2 else None),
                tuple((h, cache[h]) for h in dict.fromkeys(embed.get(t, ())) if h in cache),
            )
            for t in ids
        ]
        # Traces that need embedding first, as the old stage did: a chunk's embedding batch stays full.
        units.sort(key=lambda u: (u.known_r is not None, u.trace_id))
        return Plan(units, EfficiencySummary(), total=len(units))

    def run(self, units: Sequence[EfficiencyUnit], executor: Executor) -> Iterator[list[EfficiencyResult]]:
        cfg = self.config
        key = f"embed:{embedding_key(cfg.model, cfg.embed_precision)}:{cfg.embed_backend}"
        return executor.run(Work(_LoadEmbedder(cfg), _EfficiencyChunk(cfg), self.chunk, key=key), units)

    def commit(self, store: Store, results: Sequence[EfficiencyResult], plan: Plan[Any, EfficiencySummary]) -> int:
        s = plan.summary
        metric_rows = [r for res in results for r in res.metric_rows]
        with store.transaction():
            store.insert_rows("sentence_embeddings", [r for res in results for r in res.embeddings])
            store.insert_rows("step_similarity", [r for res in results for r in res.similarity_rows])
            inserted = store.insert_rows("trace_metrics", metric_rows)
        s.redundancy_rows += sum(1 for r in metric_rows if r["metric"] == REDUNDANCY.name)
        s.length_rows += sum(1 for r in metric_rows if r["metric"] != REDUNDANCY.name)
        s.embedded_traces += sum(1 for res in results if res.embedded_sentences)
        s.embedded_sentences += sum(res.embedded_sentences for res in results)
        s.encoded_sentences += sum(res.encoded for res in results)
        s.cached_sentences += sum(res.reused for res in results)
        s.embed_seconds += sum(res.embed_seconds for res in results)
        del inserted
        return len(results)


@dataclass(frozen=True, slots=True)
class _LoadEmbedder:
    """`Work.setup`: the worker's embedder (its model loads on the first sentence it must embed)."""

    config: Efficiency

    def __call__(self) -> Embedder:
        return Embedder(self.config.model, self.config.embed_backend, self.config.embed_precision)


@dataclass(frozen=True, slots=True)
class _EfficiencyChunk:
    """Compute one chunk of traces (picklable: the config is its only state)."""

    config: Efficiency

    def __call__(self, embedder: Embedder, units: Sequence[EfficiencyUnit]) -> list[EfficiencyResult]:
        cfg = self.config
        texts = {u.trace_id: TraceText(u.trace_id, u.reasoning, Steps(u.reasoning, tuple(map(Span._make, u.spans))))
                 for u in units}
        rows: dict[str, list[dict[str, Any]]] = {u.trace_id: [] for u in units}
        for tm in stored_trace_metrics("efficiency"):
            if tm.compute is None:
                continue
            want = [texts[u.trace_id] for u in units if tm.name in u.metrics]
            if not want:
                continue
            params = canonical_json(tm.params(cfg))
            for t, v in zip(want, tm.compute(want, cfg), strict=True):
                rows[t.trace_id].append(_metric_row(t.trace_id, tm.name, params, tm.version, v))
        need = [u for u in units if u.redundancy and u.known_r is None]
        sentences = [u.reasoning[a:b] for u in need for a, b in u.spans]
        t0 = time.perf_counter()
        res = embedder.embed(sentences, {h: v for u in need for h, v in u.cached}) if sentences else None
        emb = res.vectors if res is not None else None
        seconds = time.perf_counter() - t0 if sentences else 0.0
        r_of: dict[str, tuple[float, ...]] = {u.trace_id: u.known_r for u in units if u.known_r is not None}
        sims: dict[str, list[dict[str, Any]]] = {}
        sim_model = similarity_model(cfg)
        offset = 0
        for u in need:
            m = len(u.spans)
            r = max_prev_similarity(emb[offset : offset + m].copy()) if emb is not None else []
            offset += m
            r_of[u.trace_id] = tuple(r)
            sims[u.trace_id] = [{"trace_id": u.trace_id, "model": sim_model, "segmenter": SEGMENTER_VERSION,
                                 "idx": i, "max_prev_cos": v} for i, v in enumerate(r, start=2)]
        params = canonical_json(REDUNDANCY.params(cfg))
        for u in units:
            if u.redundancy:
                v = MetricValue(redundancy(r_of[u.trace_id], cfg.tau), cfg.model)
                rows[u.trace_id].append(_metric_row(u.trace_id, REDUNDANCY.name, params, REDUNDANCY.version, v))
        n_sent = {u.trace_id: len(u.spans) for u in need}
        # The chunk's new cache rows and counts ride on its first result (a chunk commits as one batch).
        first = units[0].trace_id if units else ""
        new_rows = tuple(res.cache_rows(embedder.key)) if res is not None else ()
        return [EfficiencyResult(u.trace_id, tuple(rows[u.trace_id]), tuple(sims.get(u.trace_id, ())),
                                 n_sent.get(u.trace_id, 0), seconds * n_sent.get(u.trace_id, 0) / max(1, len(sentences)),
                                 *((new_rows, res.encoded, res.reused) if res is not None and u.trace_id == first
                                   else ((), 0, 0)))
                for u in units]


def _metric_row(trace_id: str, metric: str, params: str, version: str, v: MetricValue) -> dict[str, Any]:
    return {"trace_id": trace_id, "metric": metric, "params": params, "code_version": version,
            "value": None if v.value is None else float(v.value), "method": v.method, "status": v.status,
            "detail": v.detail}


def compute_efficiency(store: Store | StoreAccess, config: Efficiency, executor: Executor | None = None,
                       progress: Any = None) -> EfficiencySummary:
    """Segment, then compute every missing efficiency metric: what `legival efficiency` and a run's
    efficiency job both run."""
    seg = run_stage(SegmentStage(), store)
    s = run_stage(EfficiencyStage(config), store, executor, progress)
    s.segmented = seg.segmented
    return s


def ensure_steps(store: Store | StoreAccess) -> int:
    """Segment the traces that have no steps (what transfer, judge and quality read); returns how many."""
    return run_stage(SegmentStage(), store).segmented


def _efficiency_jobs(ctx: RunContext) -> list[Job]:
    config = ctx.spec.efficiency

    def run(access: StoreAccess, executor: Executor | None, progress: Any) -> EfficiencySummary:
        return compute_efficiency(access, config, executor, progress)

    return [Job("efficiency", "efficiency", run, (EfficiencyStage(config),))]


register_stage("segment", "legival efficiency --db DB", needs=("ingest", "generate"), standalone=SegmentStage,
               order=40, description="Punkt steps of every trace (SPEC section 1); run first by the stages that read them")
register_stage("efficiency", "legival efficiency --db DB", needs=("segment",), requires=("segment",),
               build=_efficiency_jobs, gpus=lambda spec: spec.efficiency.num_gpus, order=50,
               description="token/step length, redundancy, lexical backtracking (SPEC section 3)")
