"""What one rendered report shows: the computed tables, and beside them the papers' tables and the
changes since the last run.

`reports.compute` makes the tables, `reports.paper` the papers' tables from them, `runs.diff` the
changes between recorded runs; the report stage (and `legival serve`) put the three together here and
hand them to the writers. Nothing in `ReportData` is filled in later by a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from legival_core.reports.compute.data import ReportData
from legival_core.reports.paper.tables import PaperTables, paper_tables
from legival_core.runs.diff import Changes
from legival_core.store import Store


@dataclass(frozen=True, slots=True)
class Report:
    data: ReportData
    paper: PaperTables
    changes: Changes | None = None
    """The last two recorded runs compared: diff.csv and "Changes since the last run" (None: not read)."""


def bundle(data: ReportData, store: Store | None = None, changes: Changes | None = None) -> Report:
    """The report of `data`: its paper tables computed now (`paper_tables`)."""
    return Report(data, paper_tables(data, store), changes)
