"""Every table and figure of the two papers that the report reproduces (issue 15 items 7, 8, 11).

`paper_tables(store, data)` builds them after `compute_report`'s tables; `write_report` writes each as
a CSV (`PAPER_CSV`), `paper_plots.write_paper_plots` draws its PNG and `paper_sections` shows the
same rows on the dashboard. docs/reports.md lists each file and the paper table or figure it
reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legival_core.reports.missing import Why
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.data import ReportData
    from legival_core.reports.transfer_view import TransferView

PAPER_CSV = ("rank_points.csv", "accuracy_frontier.csv", "fotu_scatter.csv", "rank_by_student.csv",
             "rm_correlations.csv", "clarity_profile.csv", "clx_regression.csv", "gcot_dimensions.csv")
"""The CSVs of the paper figures and tables, in dashboard order."""


@dataclass(slots=True)
class PaperTables:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    """File name (PAPER_CSV) -> its rows."""
    export: pl.DataFrame | None = None
    """traces.parquet: the trace table with every per-trace metric (`trace_export`)."""

    def __getitem__(self, name: str) -> pl.DataFrame:
        return self.tables[name]


def report_view(data: ReportData, export: pl.DataFrame) -> TransferView:
    """The report's own transfer numbers in the shape `rewards.rm_correlations` reads (`TransferView`)."""
    import polars as pl

    from legival_core.reports.transfer_view import TransferView

    traces = export.select("trace_id", "teacher", "dataset", "problem_id", "correct", "fotu",
                           pl.col("regression_rate").alias("rr"))
    return TransferView(traces, data.aggregates.by_dataset, data.teacher_metrics)


def paper_tables(store: Store | None, data: ReportData) -> PaperTables:
    """Every paper table from the report's tables (and, for the per-trace ones, the store)."""
    import polars as pl

    from legival_core.reports import gcot_analyses as g
    from legival_core.reports import paper_figures as f
    from legival_core.reports.rewards import SCHEMA, rm_report_table
    from legival_core.reports.trace_export import trace_export

    why = Why.of(data.coverage)
    tm = data.teacher_metrics
    teachers = tm["teacher"].to_list()
    export = trace_export(store, data)
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
    return PaperTables(tables, export)
