"""What a metric is to Legi-Val: one registry entry per report column, with its meaning.

A metric module (one per metric family, in this package) holds the pure function(s) and registers,
with `metric(...)`, one `MetricInfo` per report column: unit, direction ("higher"/"lower" is better,
None for counts and undirected numbers), level, the paper/SPEC section it implements, the stage that
computes its inputs, and where its value comes from (`source`). Reports, the dashboard's pickers,
the correlation matrix, Pareto axes and rank directions all read this list; nothing else lists
metrics.

Sources:
- "trace": a per-trace value stored by a stage in `trace_metrics` (`stored`), aggregated per
  (teacher, dataset) by `aggregate` over the complete (not truncated) traces, then averaged over
  datasets. A new efficiency metric is one `TraceMetric` with a `compute` function and one
  `metric(...)` call: the efficiency stage computes what is missing and the report aggregates it.
- "grades", "derived", "transfer", "quality", "monitor", "rewards": computed by the report from the
  grades, the trace table, the rollouts and the other stages' tables; their maths lives in the
  module that registers them or in the domain package named there.
- "interventions": the hint interventions' g-mean² table (`reports.compute.monitorability`), per teacher.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from legival_core.registry import entries, register
from legival_core.types import Steps

if TYPE_CHECKING:
    import polars as pl

Direction = Literal["higher", "lower"]
Level = Literal["trace", "teacher"]
Source = Literal["trace", "grades", "derived", "transfer", "quality", "monitor", "rewards", "interventions"]
Aggregate = Literal["mean", "median"]
BOOTSTRAPPED: tuple[str, ...] = ("trace", "grades", "derived", "transfer")
"""Sources whose values are recomputed on every bootstrap resample (they come from traces/rollouts)."""


@dataclass(frozen=True, slots=True)
class TraceText:
    """What a per-trace metric function sees: the reasoning and its SPEC section 1 steps."""

    trace_id: str
    reasoning: str
    steps: Steps


@dataclass(frozen=True, slots=True)
class MetricValue:
    """One stored value: `method` says what produced it (an encoding, a model, "lexical"), `detail`
    is canonical JSON or None, `status` is "ok" unless the value could not be computed."""

    value: float | None
    method: str
    status: str = "ok"
    detail: str | None = None


class Efficiency(Protocol):
    """What a per-trace metric reads of the spec's `efficiency:` section. The spec's pydantic
    `Efficiency` model (which holds the defaults) satisfies it; the metrics sit below the spec layer
    and never import it."""

    @property
    def model(self) -> str: ...
    @property
    def tau(self) -> float: ...
    @property
    def embed_precision(self) -> str: ...


TraceCompute = Callable[[Sequence[TraceText], Efficiency], list[MetricValue]]


@dataclass(frozen=True, slots=True)
class TraceMetric:
    """A per-trace value the efficiency stage computes and stores (`trace_metrics` row keyed by
    name, canonical params, code version). `params` returns what changes the value (never
    timeouts); `compute` is None when the stage computes it in a pass of its own (redundancy)."""

    name: str
    version: str
    params: Callable[[Efficiency], dict[str, Any]]
    compute: TraceCompute | None = None
    judged: bool = False
    """The report prefers an LLM judge's value where one is stored (backtracking, SPEC section 3)."""


Derive = Callable[["pl.DataFrame"], "pl.DataFrame"]
"""Adds the metric's per-trace column (named after the metric) to the report's trace table."""


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """One report column (see the module docstring)."""

    name: str
    unit: str
    direction: Direction | None
    level: Level
    section: str
    stage: str
    description: str = ""
    source: Source = "trace"
    stored: TraceMetric | None = None
    aggregate: Aggregate = "mean"
    order: int = 500
    """Position among the metric columns (lower first); ties by name."""
    in_teacher_dataset: bool = True
    """False for columns that exist only per teacher (quality dimensions, monitorability, RMs)."""
    family: bool = False
    """A family of columns named `<name>_*` whose members depend on the data (reward models)."""
    derive: Derive | None = None
    """Source "derived"/"grades": how the per-trace value is computed from the trace table."""
    complete_only: bool = True
    """Aggregate over the complete (not truncated) traces only; accuracy counts every trace."""
    rank: bool | None = None
    """Whether the column gets a rank; default: every directed metric."""
    correlate: bool = True
    """Whether the column enters the Spearman correlation matrix."""
    group: str | None = None
    """The gCoT dimension a text-quality metric belongs to (`dim_<group>`), else None."""
    inputs: tuple[TraceMetric, ...] = ()
    """Source "derived": the stored per-trace metrics its `derive` reads (besides the grades), so a
    run diff names them as a cause of its change (`runs.record.dependencies`)."""

    @property
    def ranked(self) -> bool:
        """A ranked metric gets `rank_*` columns and is offered as a Pareto axis."""
        return self.direction is not None if self.rank is None else self.rank and self.direction is not None

    @property
    def trace_column(self) -> str:
        """The per-trace column of the trace table this metric aggregates."""
        return self.stored.name if self.stored is not None else self.name

    @property
    def bootstrapped(self) -> bool:
        return self.source in BOOTSTRAPPED

    @property
    def stored_name(self) -> str:
        return self.stored.name if self.stored is not None else self.name


def metric(
    name: str,
    *,
    unit: str,
    direction: Direction | None,
    section: str,
    stage: str,
    description: str,
    level: Level = "trace",
    source: Source = "trace",
    stored: TraceMetric | None = None,
    aggregate: Aggregate = "mean",
    order: int = 500,
    in_teacher_dataset: bool = True,
    family: bool = False,
    derive: Derive | None = None,
    complete_only: bool = True,
    rank: bool | None = None,
    correlate: bool = True,
    group: str | None = None,
    inputs: tuple[TraceMetric, ...] = (),
) -> MetricInfo:
    """Register one report column; returns its `MetricInfo`."""
    info = MetricInfo(name, unit, direction, level, section, stage, description, source, stored, aggregate,
                      order, in_teacher_dataset, family, derive, complete_only, rank, correlate, group, inputs)
    register("metric", name, info, description=description, meta=info)
    return info


# ------------------------------------------------------------------------------------------ lookups


def all_metrics() -> list[MetricInfo]:
    """Every registered metric in column order."""
    infos: list[MetricInfo] = [e.meta for e in entries("metric")]
    return sorted(infos, key=lambda m: (m.order, m.name))


def metrics_from(*sources: str) -> list[MetricInfo]:
    return [m for m in all_metrics() if m.source in sources]


def ranked_directions() -> dict[str, Direction]:
    """Column -> better direction, for every ranked metric (column order)."""
    return {m.name: m.direction for m in all_metrics() if m.ranked and m.direction is not None and not m.family}


def stored_trace_metrics(stage: str | None = None) -> list[TraceMetric]:
    """The distinct per-trace metrics stored by `stage` (all stages when None), first use order."""
    out: dict[str, TraceMetric] = {}
    for m in all_metrics():
        if m.stored is not None and (stage is None or m.stage == stage):
            out.setdefault(m.stored.name, m.stored)
    return list(out.values())
