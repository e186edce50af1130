"""Teacher-level columns that later stages add to `teacher_metrics.csv` (reward models,
monitorability, text-quality dimensions), gathered in one place so the CLI and the aggregate flow
build the same report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.aggregate import Direction
    from legival_core.store import Store


@dataclass(slots=True)
class ExtraColumns:
    frames: list[pl.DataFrame] = field(default_factory=list)
    directions: dict[str, Direction] = field(default_factory=dict)


def stage_teacher_columns(store: Store) -> ExtraColumns:
    """Every stage contributes its columns, empty where it stored nothing (a column that cannot be
    computed is present and empty, never invented)."""
    from legival_core.rewards.correlate import teacher_columns as rm_columns
    from legival_core.stages.monitor import teacher_columns as monitor_columns
    from legival_core.stages.quality import quality_teacher_table

    out = ExtraColumns()
    for frame in (rm_columns(store), monitor_columns(store), quality_teacher_table(store, group_by=("teacher",))):
        if len(frame.columns) > 1:
            out.frames.append(frame)
    out.directions.update({"monitor_f1": "higher", "monitor_precision": "higher", "monitor_recall": "higher",
                           "global_index": "higher"})
    present = {c for f in out.frames for c in f.columns}
    out.directions = {k: v for k, v in out.directions.items() if k in present}
    return out
