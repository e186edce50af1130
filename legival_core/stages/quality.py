"""The quality stage: the gCoT text-quality metrics (SPEC section 6) for traces that lack them.

Every score is one `trace_metrics` row keyed by (trace, metric, params, code version); params carry
everything that changes the number (model, reference corpus, window, ...). A group of metrics is
computed for the traces with no usable row for its first metric at those params and version, in
chunks that each commit in one transaction, so a rerun computes nothing and a crash loses one chunk.
A metric whose model is not on this machine gets rows with value NULL and status 'unavailable'
(method = the model asked for, detail = why); once the model is installed those rows are replaced by
real ones on the next run. A group runs on the datasets it declares (Z3: GSM8K, through automatic IR
extraction; a trace without an extractable IR gets status 'unparsed' rows, counted in the summary); a
metric the verifier leaves undefined gets 'undefined'.

One `QualityStage` per group: `plan` reads the group's missing traces (and, for cohesion, their
steps), `run` loads the group's model in `Work.setup` and scores chunks without the store, `commit`
writes one chunk. The groups are registered, one module each, in `legival_core/quality/groups/`
(`quality.group`): the stage reads what it needs of a group from its registration (its datasets,
whether it reads steps, whether it runs on a process pool).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from legival_core.embed import embedding_key, sentence_hash
from legival_core.quality._local import Unavailable
from legival_core.quality.group import (
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityUnit,
    Row,
    load_computer,
    quality_group,
    resolve_groups,
    row,
    unavailable_rows,
)
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.base import (
    Executor,
    InProcessExecutor,
    Plan,
    ProcessExecutor,
    StoreAccess,
    Work,
    phase_progress,
    run_stage,
    store_access,
)
from legival_core.stages.efficiency import SegmentStage
from legival_core.stages.isolation import UnitFailure
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store, writes
from legival_core.store import planner as reads

__all__ = [
    "Progress",
    "QualityConfig",
    "QualityStage",
    "QualitySummary",
    "compute_quality",
    "resolve_groups",
]

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total): the phase is the group's name."""
DEFAULT_CONFIG = QualityConfig()


@dataclass(slots=True)
class QualitySummary:
    computed: dict[str, int] = field(default_factory=dict)
    """group -> traces scored this run."""
    rows: dict[str, int] = field(default_factory=dict)
    """group -> rows inserted this run (including 'unavailable' / 'unparsed' rows)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """group -> why its model is not here."""
    seconds: dict[str, float] = field(default_factory=dict)
    z3_unparsed: int = 0
    z3_extracted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def merge(self, other: QualitySummary) -> None:
        self.computed |= other.computed
        self.rows |= other.rows
        self.unavailable |= other.unavailable
        self.seconds |= other.seconds
        self.z3_unparsed += other.z3_unparsed
        self.z3_extracted += other.z3_extracted


@dataclass(frozen=True, slots=True)
class QualityBatch:
    """The rows of one chunk of traces of one group; `unavailable` says why they are placeholders."""

    trace_ids: tuple[str, ...]
    rows: tuple[Row, ...]
    unavailable: str | None = None
    elapsed: float = 0.0
    """Seconds since the group's run started, when this chunk was done."""
    embeddings: tuple[Row, ...] = ()
    """`sentence_embeddings` rows the chunk computed (cohesion), for the shared cache."""


@dataclass(frozen=True, slots=True)
class LoadGroup:
    """`Work.setup`: the group's computer with its model loaded, or why the model is not here."""

    group: Group
    config: QualityConfig

    def __call__(self) -> Computer | Unavailable:
        return load_computer(self.group, self.config)


@dataclass(frozen=True, slots=True)
class ScoreChunk:
    """`Work.process`: score one chunk (placeholder rows when the model is unavailable)."""

    group: Group

    def __call__(self, worker: Computer | Unavailable, units: Sequence[QualityUnit]) -> list[QualityBatch]:
        ids = tuple(u.trace_id for u in units)
        if isinstance(worker, Unavailable):
            return [QualityBatch(ids, tuple(unavailable_rows(self.group, ids, worker.reason)), worker.reason)]
        rows = tuple(worker(units))
        drain = getattr(worker, "drain_embeddings", None)
        return [QualityBatch(ids, rows, embeddings=tuple(drain()) if drain is not None else ())]


@dataclass(frozen=True, slots=True)
class FailedUnit:
    """`Work.isolate`: 'error' rows, with the reason, for a trace whose process died or hung."""

    group: Group

    def __call__(self, unit: QualityUnit, reason: str) -> list[QualityBatch]:
        rows = tuple(row(unit.trace_id, m, self.group, None, "error", {"reason": reason}) for m in self.group.metrics)
        return [QualityBatch((unit.trace_id,), rows)]


@dataclass(frozen=True, slots=True)
class QualityStage:
    """One registered metric group (`quality.group`) for the traces that have no usable row of it."""

    group: str
    config: QualityConfig = DEFAULT_CONFIG
    name: str = "quality"

    @property
    def unit_scope(self) -> str:
        """Failed units are recorded per group (`isolation.failure_stage`)."""
        return str(self.group)

    @property
    def registered(self) -> QualityGroup:
        return quality_group(self.group)

    @property
    def definition(self) -> Group:
        return self.registered.at(self.config)

    def plan(self, store: Store) -> Plan[QualityUnit, QualitySummary]:
        g = self.definition
        todo = reads.traces_missing_quality(store, g.metrics[0], g.params, g.version, g.datasets)
        ids = todo["trace_id"].to_list()
        spans = reads.step_spans(store, ids, SEGMENTER_VERSION) if self.registered.needs_steps else {}
        hashes = {r["trace_id"]: [sentence_hash(r["reasoning"][a:b]) for a, b in spans.get(r["trace_id"], ())]
                  for r in todo.iter_rows(named=True)} if spans else {}
        cache = reads.cached_embeddings(store, embedding_key(self.config.embed_model),
                                        list({h for hs in hashes.values() for h in hs})) if hashes else {}
        units = [QualityUnit(r["trace_id"], r["dataset"], r["reasoning"], r["answer_text"], r["question"],
                             tuple(spans.get(r["trace_id"], ())),
                             tuple((h, cache[h]) for h in dict.fromkeys(hashes.get(r["trace_id"], ())) if h in cache))
                 for r in todo.iter_rows(named=True)]
        summary = QualitySummary(computed={self.group: 0}, rows={self.group: 0})
        return Plan(units, summary, total=len(units))

    def run(self, units: Sequence[QualityUnit], executor: Executor) -> Iterator[list[QualityBatch]]:
        g, cpu_bound = self.definition, self.registered.cpu_bound
        t0 = time.perf_counter()
        if cpu_bound and isinstance(executor, InProcessExecutor) and self.config.z3_workers != 1:
            # it holds the GIL (Z3) and the stage is CPU-bound: on every core (a caller's executor, a
            # Ray pool on a cluster, is kept as given)
            executor = ProcessExecutor(self.config.z3_workers)
        work = Work(LoadGroup(g, self.config), ScoreChunk(g), self.config.chunk)
        if cpu_bound:  # one input that kills or hangs its process costs that trace only
            work = replace(work, isolate=FailedUnit(g), unit_timeout_s=self.config.z3_trace_timeout_s)
        for batch in executor.run(work, units):
            elapsed = time.perf_counter() - t0
            yield [b if isinstance(b, UnitFailure) else QualityBatch(b.trace_ids, b.rows, b.unavailable, elapsed,
                                                                      b.embeddings) for b in batch]

    def commit(self, store: Store, results: Sequence[QualityBatch], plan: Plan[Any, QualitySummary]) -> int:
        g, s, name, extraction = self.definition, plan.summary, self.group, self.registered.extraction
        done = 0
        for b in results:
            if b.embeddings:
                writes.add(store, "sentence_embeddings", b.embeddings)
            if b.unavailable is not None:
                s.unavailable[name] = b.unavailable
                s.rows[name] += writes.add(store, "trace_metrics", b.rows).inserted
            else:
                # Real scores replace this group's 'unavailable' placeholders of the same traces.
                s.rows[name] += writes.replace_metric_rows(store, b.rows, g.metrics, g.params, g.version,
                                                           b.trace_ids, replace=("unavailable",))
                s.computed[name] += len(b.trace_ids)
                s.seconds[name] = round(b.elapsed, 3)
                if extraction:
                    unparsed = sum(1 for r in b.rows if r["metric"] == g.metrics[0] and r["status"] == "unparsed")
                    s.z3_unparsed += unparsed
                    s.z3_extracted += len(b.trace_ids) - unparsed
            done += len(b.trace_ids)
        return done


def compute_quality(
    store: Store | StoreAccess,
    metrics: Sequence[str] | None = None,
    config: QualityConfig = DEFAULT_CONFIG,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> QualitySummary:
    """Every requested group (group or metric names; None: all) for the traces that lack it: what
    `legival quality` and a run's quality job both run. The steps come first when a group reads them."""
    access = store_access(store) if isinstance(store, Store) else store
    groups = [QualityStage(name, config) for name in resolve_groups(list(metrics) if metrics else None)]
    if any(g.registered.needs_steps for g in groups):
        run_stage(SegmentStage(), access)
    with access() as s:
        writes.add(s, "meta", [{"key": f"clarity_reference:{config.clarity_reference.ref_id}",
                                "value": config.clarity_reference.to_json()}])
    summary = QualitySummary()
    for stage in groups:
        summary.merge(run_stage(stage, access, executor, phase_progress(progress, stage.group)))
    return summary


def _quality_jobs(ctx: RunContext) -> list[Job]:
    config = ctx.spec.quality
    if not config.enabled:
        return []
    metrics = list(config.metrics) if config.metrics else None

    def run(access: StoreAccess, executor: Executor | None, _progress: Any) -> QualitySummary:
        return compute_quality(access, metrics, executor=executor)

    stages = tuple(QualityStage(name) for name in resolve_groups(metrics))
    return [Job("quality", "quality " + (",".join(metrics) if metrics else "all"), run, stages)]


def _quality_summary(results: list[Any]) -> dict[str, Any]:
    return {"quality": results[0].as_dict()} if results else {}


register_stage("quality", "legival quality --db DB", needs=("segment",), build=_quality_jobs,
               summarize=_quality_summary, order=80,
               description="gCoT text-quality metrics: clarity, coherence, consistency, informativeness, Z3 "
                           "(SPEC section 6)")
