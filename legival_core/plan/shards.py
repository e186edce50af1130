"""A plan's transfer shards read together: every (teacher, dataset) shard of a student from one query
of each kind, as `TransferStage.missing` and `units` read one shard.

`legival plan` used to ask each shard's own `TransferStage` (six statements per shard: the transfer
rows, the student, its stored depths, the traces' text and steps...): DuckDB's cost per statement
(about a millisecond on the scratch store) then made a 2,000-teacher spec spend most of its two
minutes in statements that each returned two rows. The counts are the same functions' on the same
rows (`transfer_traces.cut_rows`, `missing_rollouts`, `planned_units`); tests/core/plan/test_batched_plan.py
compares them with each shard's own plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from legival_core.datasets.base import current_graders
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.transfer import MissingRollouts, missing_rollouts, register_student
from legival_core.stages.transfer_traces import TransferTrace, cut_rows, load_transfer_traces
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.transfer.rollout_plan import StudentConfig

if TYPE_CHECKING:
    import polars as pl

Cell = tuple[str, str]
"""(teacher, dataset)."""

ALONE = 64
"""A cell with this many traces to read or more is read by a query of its own, naming its teacher and
dataset (DuckDB then skips the row groups of other cells: a paper-scale shard reads its 256 sampled
traces as before); smaller cells are read together."""
TOGETHER = 4096
"""Traces read by one query of small cells (what is held in memory at once)."""
GROUP = 4096
"""Transfer traces whose stored depths are read by one query (their depth sets, ~2 KB each, are held
until the group's shards are planned)."""


def missing_by_cell(store: Store, c: StudentConfig, cells: Sequence[Cell],
                    limit: int | None) -> Iterator[list[tuple[Cell, MissingRollouts]]]:
    """`TransferStage(c, teacher, dataset, limit).missing(store)` of each cell, in order, from one
    read of every cell's transfer rows and one read of the student's stored depths per group of cells
    holding up to `GROUP` traces (a group's depths are what is held at once; each cell's `done`
    holds its group's)."""
    import time

    started = time.time()
    graders = current_graders(reads.stored_datasets(store))
    every = reads.correct_traces_with_steps(store, graders, SEGMENTER_VERSION, None, None)
    kept, _ = cut_rows(every, limit)  # row by row, and `rn` counts within a cell: each cell's own cut
    empty = every.filter(every["m"] == 0).group_by("teacher", "dataset").len()
    empties = {(t, d): n for t, d, n in empty.iter_rows()}
    parts = kept.partition_by("teacher", "dataset", as_dict=True, maintain_order=True)
    register_student(store, c)
    group: list[tuple[Cell, pl.DataFrame]] = []
    held = 0

    def missing() -> list[tuple[Cell, MissingRollouts]]:
        done = reads.stored_rollout_depths(store, c.student_key, [t for _, r in group for t in r["trace_id"].to_list()],
                                           c.rollout_table)
        return [(cell, missing_rollouts(c, r, empties.get(cell, 0), done, started)) for cell, r in group]

    for cell in cells:
        rows = parts.get(cell, kept.clear())
        if group and held + rows.height > GROUP:
            yield missing()
            group, held = [], 0
        group.append((cell, rows))
        held += rows.height
    if group:
        yield missing()


def traces_by_cell(store: Store, rows_of: Sequence[tuple[Cell, pl.DataFrame]]) -> Iterator[tuple[Cell, list[TransferTrace]]]:
    """Each cell's traces (`load_transfer_traces` of its rows, in their order), cell after cell in
    `rows_of`'s order: a cell of `ALONE` rows or more by its own query, runs of smaller cells by one
    query for up to `TOGETHER` traces."""
    import polars as pl

    pending: list[tuple[Cell, pl.DataFrame]] = []
    held = 0

    def flush() -> Iterator[tuple[Cell, list[TransferTrace]]]:
        nonlocal held
        if not pending:
            return
        traces = load_transfer_traces(store, pl.concat([rows for _, rows in pending]))
        at = 0
        for cell, rows in pending:
            yield cell, traces[at : at + rows.height]
            at += rows.height
        pending.clear()
        held = 0

    for cell, rows in rows_of:
        if rows.height >= ALONE:
            yield from flush()
            yield cell, load_transfer_traces(store, rows, *cell)
            continue
        if held + rows.height > TOGETHER:
            yield from flush()
        pending.append((cell, rows))
        held += rows.height
    yield from flush()
