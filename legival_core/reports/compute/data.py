"""What a report is computed from (its settings) and what it computes (every table, before writing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legival_core.metrics.redundancy import similarity_model
from legival_core.run_config import Efficiency, Report, Transfer, default_of

if TYPE_CHECKING:
    import polars as pl

    from legival_core.metrics.base import Direction
    from legival_core.reports.compute.aggregate import Aggregates
    from legival_core.reports.compute.bootstrap import BootstrapResult
    from legival_core.run_config import BenchmarkSpec
    from legival_core.transfer.utility import TransferTable


@dataclass(frozen=True, slots=True)
class StepAnalysis:
    """The step effects, the logistic model and the students' agreement (`compute.step_effects`)."""

    effects: pl.DataFrame
    logistic: pl.DataFrame
    agreement: pl.DataFrame


@dataclass(frozen=True, slots=True)
class ReportConfig:
    """The report's settings, every default from the spec models: the redundancy threshold and
    embedding model whose rows it reads, the number of bins the rollouts were planned with, the
    bootstrap and the dashboard's trace sample."""

    efficiency: Efficiency = field(default_factory=Efficiency)
    n_bins: int = default_of(Transfer, "n_bins")
    resamples: int = default_of(Report, "resamples")
    seed: int = default_of(Report, "seed")
    dashboard_traces: int = default_of(Report, "dashboard_traces")

    @classmethod
    def from_spec(cls, spec: BenchmarkSpec) -> ReportConfig:
        return cls(spec.efficiency, spec.transfer.n_bins, spec.report.resamples, spec.report.seed,
                   spec.report.dashboard_traces)

    @property
    def tau(self) -> float:
        return self.efficiency.tau

    @property
    def model(self) -> str:
        """The embedding model whose r_i the report reads (marked when its vectors are int8)."""
        return similarity_model(self.efficiency)


@dataclass(slots=True)
class ReportData:
    """Every table computed from the store, before anything is written. The papers' tables
    (`reports.paper`) and the changes since the last run (`runs.diff`) are computed from these and
    travel beside them (`reports.render.bundle.Report`), never inside."""

    traces: pl.DataFrame
    students: pl.DataFrame
    transfer: TransferTable
    aggregates: Aggregates
    teacher_metrics: pl.DataFrame
    correlations: pl.DataFrame
    correlation_metrics: list[str]
    rank_stability: pl.DataFrame
    delta_tu: pl.DataFrame
    rank_pairs: pl.DataFrame
    elbow: pl.DataFrame
    tu_curves: pl.DataFrame
    boot: BootstrapResult | None
    config: ReportConfig
    directions: dict[str, Direction] = field(default_factory=dict)
    coverage: pl.DataFrame | None = None
    """Per (teacher, dataset, metric): computed / not run / unavailable / too few traces (`coverage`)."""
    export: pl.DataFrame | None = None
    """traces.parquet: the trace table with every per-trace number the store holds (`trace_export`);
    None for tables assembled without a store (then the trace table is exported)."""
    step_events: pl.DataFrame | None = None
    """step_events.parquet: the stored step events of the current events version (`store.step_events.
    step_events`, docs/step_events.md); None for tables assembled without a store."""
    human_study: pl.DataFrame | None = None
    """human_study.csv: the human studies' table (`compute.human.human_study_table`, docs/study.md
    "Analysis"); None for tables assembled without a store (then the not-run table is written)."""
    monitorability: pl.DataFrame | None = None
    """monitorability.csv: hint interventions scored with g-mean² (`compute.monitorability`, docs/monitorability.md)."""
    early_answering: pl.DataFrame | None = None
    """early_answering.csv: early answering beside the students' transfer curves (`compute.early_answering`,
    docs/transfer.md "Early answering")."""
    monitor_agreement: pl.DataFrame | None = None
    """agreement.csv: hint monitors against each other (`compute.monitor_agreement`, docs/agreement.md)."""
    reward_watch: pl.DataFrame | None = None
    """reward_watch.csv: the Goodhart watch of the rewards a training loop logged (`compute.reward_watch`,
    docs/reward.md)."""
    steps: StepAnalysis | None = None
    """The step effects, the logistic model and the students' agreement (`compute.step_effects`),
    computed from `step_events`; None where `step_events` is."""

    @property
    def teacher_dataset(self) -> pl.DataFrame:
        return self.aggregates.by_dataset

    @property
    def tau(self) -> float:
        return self.config.tau

    @property
    def model(self) -> str:
        return self.config.model
