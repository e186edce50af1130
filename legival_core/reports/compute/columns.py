"""Teacher-level columns from the stages whose results exist per teacher only: reward models,
monitorability, text quality. Each is empty where its stage stored nothing (a column that cannot be
computed is present and empty, never invented); which columns exist and which way is better comes
from the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.reports.compute.monitoring import teacher_columns as monitor_columns
from legival_core.reports.compute.quality_table import quality_teacher_table
from legival_core.reports.compute.rm_scores import teacher_columns as rm_columns
from legival_core.store import Store

if TYPE_CHECKING:
    import polars as pl


def teacher_columns(store: Store) -> list[pl.DataFrame]:
    """Frames keyed by `teacher`, one per stage that contributes columns."""
    frames = [rm_columns(store), monitor_columns(store), quality_teacher_table(store, group_by=("teacher",))]
    return [f for f in frames if len(f.columns) > 1]
