"""A gCoT text-quality metric group (SPEC section 6): what it computes, how, and its registration.

A group is one pass of the quality stage: one module under `legival_core/quality/groups/` calls
`register_quality_group(QualityGroup(...))` with its metrics (unit, direction, gCoT dimension), the
params that change its numbers, its code version, the datasets it applies to and the loader of its
computer. That module is the whole of a new quality metric: the registry is the one list, and every
other view (the stage's groups, `--metrics` names, the report's columns, the dimensions and the
Global Index, the dashboard pickers, the correlation matrix) is derived from it here.

The report takes the teacher-level mean of each metric, min-max normalises the dimension members
across teachers (`<metric>_norm`, inverted where lower is better), averages them into `dim_<dimension>`
and those into the Global Index (`legival_core.quality.dimensions`). Text-quality columns exist per
teacher only and are not ranked (except the Global Index): descriptive scores beside the paper's metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.catalog import MPNET, SMOLLM2
from legival_core.metrics.base import Direction, metric
from legival_core.quality._local import Unavailable
from legival_core.quality.alignscore import DEFAULT_ALIGNSCORE_BACKBONE, DEFAULT_ALIGNSCORE_CKPT
from legival_core.quality.clarity import BUILTIN_REFERENCE, ClarityReference, SsAnchor
from legival_core.quality.cohesion import DEFAULT_CROSS_ENCODER, DEFAULT_MOMENTUM, CohesionParams
from legival_core.quality.consistency import DEFAULT_FACTCC_MODEL, DEFAULT_NLI_MODEL, NLI_WINDOW
from legival_core.quality.informativeness import DEFAULT_BERTSCORE_MODEL, DEFAULT_BLEURT_CKPT
from legival_core.quality.z3_ir import DEFAULT_TIMEOUT_MS
from legival_core.registry import entries, get, register
from legival_core.types import canonical_json

SECTION = "SPEC §6 (gCoT)"
DIMENSION_ORDER: tuple[str, ...] = ("clarity", "coherence", "consistency", "informativeness")
"""gCoT's dimensions in the report's order; a metric naming another dimension adds it after these."""
METRIC_ORDER, NORM_ORDER, DIM_ORDER = 600, 710, 760
"""Column order of the per-trace metrics, their `_norm` columns and the dimension scores."""


@dataclass(frozen=True, slots=True)
class QualityConfig:
    """Which model each metric uses; all of it is recorded in the params of the rows."""

    embed_model: str = MPNET
    """Cohesion's sentence embeddings (the gCoT paper's all-mpnet-base-v2; redundancy keeps MiniLM)."""
    embed_backend: str = "auto"
    """Cohesion's embedding backend (`embed.BACKENDS`; auto: ONNX Runtime on a CPU). Not in any key: fp32
    backends agree within 1e-6 (tested)."""
    cohesion: CohesionParams = CohesionParams()
    clarity_reference: ClarityReference = BUILTIN_REFERENCE
    ss_anchor: SsAnchor = "paper"
    """SS_lite anchor: "paper" (p5) or "script" (the authors' p95; `quality.clarity`)."""
    momentum_model: str = DEFAULT_MOMENTUM
    cross_encoder_model: str = DEFAULT_CROSS_ENCODER
    nli_model: str = DEFAULT_NLI_MODEL
    nli_window: int = NLI_WINDOW
    factcc_model: str = DEFAULT_FACTCC_MODEL
    alignscore_ckpt: str = DEFAULT_ALIGNSCORE_CKPT
    alignscore_backbone: str = DEFAULT_ALIGNSCORE_BACKBONE
    ppl_model: str = SMOLLM2
    ppl_max_length: int = 1024
    ppl_stride: int = 512
    bertscore_model: str = DEFAULT_BERTSCORE_MODEL
    bleurt_ckpt: str = DEFAULT_BLEURT_CKPT
    z3_timeout_ms: int = DEFAULT_TIMEOUT_MS
    z3_workers: int | None = None
    """Processes a `cpu_bound` group runs on (`ProcessExecutor`; None: every CPU, 1: in process). Not in
    any key: the rows are the same (tested)."""
    z3_trace_timeout_s: float = 60.0
    """Wall-clock limit per trace of a `cpu_bound` group on the process pool: a trace that runs longer,
    or whose process dies, gets 'error' rows with the reason and the rest of its chunk is computed
    (`Work.isolate`). Not in any key (only a hung trace's rows depend on it)."""
    chunk: int = 200
    """Traces per chunk: the commit unit (a crash loses at most one chunk)."""


@dataclass(frozen=True, slots=True)
class QualityUnit:
    """One trace to score, with everything any group reads (`spans`: its steps, for cohesion)."""

    trace_id: str
    dataset: str
    reasoning: str
    answer_text: str
    question: str
    spans: tuple[tuple[int, int], ...] = ()
    cached: tuple[tuple[str, bytes], ...] = ()
    """(sentence hash, vector) of its steps found in the shared embedding cache (cohesion)."""


@dataclass(frozen=True, slots=True)
class Group:
    """One metric group at one configuration: the key of its rows and the method they record (what
    travels to a worker process with the chunk)."""

    name: str
    params: str
    version: str
    method: str
    metrics: tuple[str, ...]
    """The rows it writes; the first one keys "missing" in the quality stage."""
    datasets: tuple[str, ...] | None = None
    """Only traces of these datasets (None: all)."""


Row = dict[str, Any]
Computer = Callable[[Sequence[QualityUnit]], list[Row]]


@dataclass(frozen=True, slots=True)
class QualityMetric:
    """One per-trace quality metric: its report column."""

    name: str
    unit: str
    direction: Direction | None
    description: str
    dimension: str | None = None
    """The gCoT dimension it is a member of (None: reported, not in a dimension)."""


@dataclass(frozen=True, slots=True)
class QualityGroup:
    """A registered group. `key(cfg)` returns (params, method): what changes its numbers, recorded in
    the key of its rows, and what produced them; `load(group, cfg)` builds its computer once per worker
    (loading its model) or says why it cannot (`Unavailable`)."""

    name: str
    metrics: tuple[QualityMetric, ...]
    version: str
    key: Callable[[QualityConfig], tuple[dict[str, Any], str]]
    load: Callable[[Group, QualityConfig], Computer | Unavailable]
    order: int
    """Its place among the groups (and its metrics' column order: `METRIC_ORDER + order`...)."""
    description: str
    datasets: tuple[str, ...] | None = None
    """The datasets it applies to (None: every dataset)."""
    needs_steps: bool = False
    """Reads the trace's steps (`QualityUnit.spans`): the stage segments first."""
    cpu_bound: bool = False
    """Holds the GIL: runs on a process pool, each trace isolated with `z3_trace_timeout_s`."""
    extraction: bool = False
    """Its 'unparsed' rows count as failed extractions in the summary (`z3_unparsed` / `z3_extracted`)."""

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    def at(self, cfg: QualityConfig) -> Group:
        params, method = self.key(cfg)
        return Group(self.name, canonical_json(params), self.version, method, self.metric_names, self.datasets)


def register_quality_group(group: QualityGroup) -> QualityGroup:
    """Register the group and its report columns (each metric, and `<metric>_norm` / `dim_<dimension>`
    for the members of a dimension)."""
    if not group.metrics:
        raise ValueError(f"quality group {group.name!r} has no metric")
    register("quality", group.name, group, description=group.description)
    for i, m in enumerate(group.metrics):
        metric(m.name, unit=m.unit, direction=m.direction, section=SECTION, stage="quality", source="quality",
               level="trace", order=METRIC_ORDER + group.order + i, in_teacher_dataset=False, rank=False,
               group=m.dimension, description=m.description)
        if m.dimension is None:
            continue
        metric(f"{m.name}_norm", unit="score", direction="higher", section=SECTION, stage="quality",
               source="quality", level="teacher", order=NORM_ORDER + group.order + i, in_teacher_dataset=False,
               rank=False, description=f"{m.name} min-max normalised across teachers (1 = best)")
        dims = [*DIMENSION_ORDER, m.dimension] if m.dimension not in DIMENSION_ORDER else list(DIMENSION_ORDER)
        metric(f"dim_{m.dimension}", unit="score", direction="higher", section=SECTION, stage="quality",
               source="quality", level="teacher", order=DIM_ORDER + dims.index(m.dimension), in_teacher_dataset=False,
               rank=False, description=f"gCoT {m.dimension} dimension: mean of its normalised metrics")
    return group


metric("global_index", unit="score", direction="higher", section=SECTION, stage="quality", source="quality",
       level="teacher", order=770, in_teacher_dataset=False,
       description="gCoT Global Index: mean of the dimension scores present")
metric("n_dimensions", unit="count", direction=None, section=SECTION, stage="quality", source="quality",
       level="teacher", order=780, in_teacher_dataset=False, correlate=False,
       description="how many dimensions the Global Index rests on (a count: not correlated)")


# ------------------------------------------------------------------------------------------ views


def quality_groups() -> list[QualityGroup]:
    """Every registered group, in their order."""
    return sorted((e.obj for e in entries("quality")), key=lambda g: (g.order, g.name))


def metric_groups() -> dict[str, tuple[str, ...]]:
    """Group name (what `--metrics` takes) -> the metric rows it writes."""
    return {g.name: g.metric_names for g in quality_groups()}


def quality_metrics() -> tuple[str, ...]:
    """Every per-trace quality metric, in column order."""
    return tuple(m for g in quality_groups() for m in g.metric_names)


def dimensions() -> dict[str, tuple[str, ...]]:
    """gCoT dimension -> its member metrics, dimensions in `DIMENSION_ORDER` (others after)."""
    out: dict[str, tuple[str, ...]] = {}
    for g in quality_groups():
        for m in g.metrics:
            if m.dimension is not None:
                out[m.dimension] = (*out.get(m.dimension, ()), m.name)
    rank = {d: i for i, d in enumerate(DIMENSION_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def lower_is_better() -> frozenset[str]:
    return frozenset(m.name for g in quality_groups() for m in g.metrics if m.direction == "lower")


def group_defs(cfg: QualityConfig) -> dict[str, Group]:
    """Every group at this configuration, in their order."""
    return {g.name: g.at(cfg) for g in quality_groups()}


def quality_group(name: str) -> QualityGroup:
    """The registered group `name`."""
    group: QualityGroup = get("quality", name)
    return group


def load_computer(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    """The computer of group `g` with its model loaded, or why its model is not here."""
    return quality_group(g.name).load(g, cfg)


def resolve_groups(metrics: list[str] | tuple[str, ...] | None) -> list[str]:
    """Group names from `--metrics` (group names or metric names); every group when None/empty."""
    groups = metric_groups()
    if not metrics:
        return list(groups)
    out: list[str] = []
    for name in metrics:
        key = name.strip().lower()
        group = key if key in groups else next((g for g, ms in groups.items() if key in ms), None)
        if group is None:
            raise ValueError(f"unknown quality metric {name!r}; known: {', '.join(groups)} "
                             f"(or one of {', '.join(quality_metrics())})")
        if group not in out:
            out.append(group)
    return out


def row(tid: str, metric: str, g: Group, value: float | None, status: str = "ok",
        detail: dict[str, Any] | None = None, method: str | None = None) -> Row:
    """A `trace_metrics` row of group `g` ('ok' with no value becomes 'undefined')."""
    return {"trace_id": tid, "metric": metric, "params": g.params, "code_version": g.version,
            "value": None if value is None else float(value), "method": method or g.method,
            "status": status if value is not None or status != "ok" else "undefined",
            "detail": None if detail is None else canonical_json(detail)}


def unavailable_rows(g: Group, trace_ids: Sequence[str], reason: str) -> list[Row]:
    """Placeholder rows (value NULL) of every metric of `g`, replaced once its model is installed."""
    detail = {"reason": reason}
    return [row(t, m, g, None, "unavailable", detail) for t in trace_ids for m in g.metrics]


def per_unit(g: Group, score: Callable[[QualityUnit], float | None]) -> Computer:
    """A computer of a one-metric group scoring each unit on its own."""
    metric = g.metrics[0]

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        return [row(u.trace_id, metric, g, score(u)) for u in units]

    return run


def pairwise(g: Group, score: Callable[[list[str], list[str]], list[float]]) -> Computer:
    """A computer of a one-metric group scoring (answer, reasoning) pairs in one batch."""
    metric = g.metrics[0]

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        vals = score([u.answer_text for u in units], [u.reasoning for u in units])
        return [row(u.trace_id, metric, g, v) for u, v in zip(units, vals, strict=True)]

    return run
