"""Write the report directory from the store alone (no model call)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.embed import DEFAULT_MODEL
from legival_core.metrics.efficiency import DEFAULT_TAU
from legival_core.reports.tables import teacher_dataset_metrics, trace_table
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl


@dataclass(slots=True)
class ReportResult:
    teacher_dataset: pl.DataFrame
    files: list[str] = field(default_factory=list)


def build_reports(
    store: Store, out: str | Path, tau: float = DEFAULT_TAU, model: str = DEFAULT_MODEL
) -> ReportResult:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    traces = trace_table(store, tau=tau, model=model)
    td = teacher_dataset_metrics(traces)
    result = ReportResult(teacher_dataset=td)
    td.write_csv(out / "teacher_dataset_metrics.csv")
    result.files.append("teacher_dataset_metrics.csv")
    traces.write_parquet(out / "traces.parquet")
    result.files.append("traces.parquet")
    return result
