"""Every table and figure of the two papers that the report reproduces (issue 15 items 7, 8, 11).

`paper_tables(data, store)` builds them from `compute_report`'s tables (the store only for the RM
correlations on the problems every teacher solved, whose transfer numbers are recomputed on that
subset); `render.files.write_report` writes each as a CSV (`PAPER_CSV`), `render.paper_plots` draws
its PNG and `render.paper_sections` shows the same rows on the dashboard. docs/reports.md lists each
file and the paper table or figure it reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legival_core.reports.compute.data import ReportData
from legival_core.reports.compute.missing import Why
from legival_core.reports.compute.trace_export import trace_export
from legival_core.reports.compute.transfer_view import TransferView
from legival_core.reports.paper import figures as f
from legival_core.reports.paper import gcot as g
from legival_core.reports.paper.rewards import SCHEMA, rm_report_table
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl

PAPER_CSV = ("rank_points.csv", "accuracy_frontier.csv", "fotu_scatter.csv", "rank_by_student.csv",
             "rm_correlations.csv", "clarity_profile.csv", "clx_regression.csv", "gcot_dimensions.csv")
"""The CSVs of the paper figures and tables, in dashboard order."""


@dataclass(slots=True)
class PaperTables:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    """File name (PAPER_CSV) -> its rows."""

    def __getitem__(self, name: str) -> pl.DataFrame:
        return self.tables[name]


def report_view(data: ReportData, export: pl.DataFrame) -> TransferView:
    """The report's own transfer numbers in the shape `rewards.rm_correlations` reads (`TransferView`)."""
    import polars as pl

    traces = export.select("trace_id", "teacher", "dataset", "problem_id", "correct", "fotu",
                           pl.col("regression_rate").alias("rr"))
    return TransferView(traces, data.aggregates.by_dataset, data.teacher_metrics)


def paper_tables(data: ReportData, store: Store | None = None) -> PaperTables:
    """Every paper table from the report's tables (module docstring); without a store the RM table
    keeps its schema and no rows."""
    import polars as pl

    why = Why.of(data.coverage)
    tm = data.teacher_metrics
    teachers = tm["teacher"].to_list()
    export = exported(data)
    if store is not None:
        view = report_view(data, export)
        rm = rm_report_table(store, view, why, data.config.resamples)
    else:
        rm = pl.DataFrame(schema={**{k: getattr(pl, v) for k, v in SCHEMA.items()}, "status": pl.Utf8,
                                  "detail": pl.Utf8})
    tables = {
        "rank_points.csv": f.rank_points(tm, data.aggregates.by_dataset, data.directions, why),
        "accuracy_frontier.csv": f.accuracy_frontier(tm, data.directions, why),
        "fotu_scatter.csv": f.fotu_scatter(tm, why),
        "rank_by_student.csv": f.rank_by_student(data.aggregates.by_student, teachers, data.directions, why),
        "rm_correlations.csv": rm,
        "clarity_profile.csv": g.clarity_profile(tm, export, why),
        "clx_regression.csv": g.clx_regression(export, teachers, why),
        "gcot_dimensions.csv": g.dimension_table(tm, why),
    }
    assert tuple(tables) == PAPER_CSV
    return PaperTables(tables)


def exported(data: ReportData) -> pl.DataFrame:
    """traces.parquet: the per-trace export `compute_report` made, or (tables assembled without a
    store) the trace table with the per-trace transfer values and the other columns empty."""
    return data.export if data.export is not None else trace_export(None, data)
