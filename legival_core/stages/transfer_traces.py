"""The transfer traces (SPEC section 4): a teacher's correct traces with at least one step, in a stable
order, `limit` per (teacher, dataset); their ids and step counts first (`transfer_rows`: what a resume
plan needs), their problem and steps only for the traces that have work (`load_transfer_traces`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.bulk import gc_paused
from legival_core.datasets.base import current_graders
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import Problem, Steps

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True, slots=True)
class TransferTrace:
    trace_id: str
    teacher: str
    dataset: str
    problem: Problem
    steps: Steps



def select_transfer_traces(
    store: Store, teacher: str | None = None, dataset: str | None = None, limit: int | None = None
) -> tuple[list[TransferTrace], int]:
    """Correct, complete traces with m >= 1, in a stable order (teacher, dataset, problem_id,
    trace_id); `limit` keeps the first N per (teacher, dataset). Also returns how many correct
    traces have no steps (they take no part in transfer utility and are reported)."""
    rows, empty = transfer_rows(store, teacher, dataset, limit)
    return load_transfer_traces(store, rows, teacher, dataset), empty


def transfer_rows(store: Store, teacher: str | None, dataset: str | None,
                  limit: int | None) -> tuple[pl.DataFrame, int]:
    """The transfer traces' ids, cells and step counts m, without their text (a resume plan reads
    the text and spans of the few traces with missing depths only), and the correct traces with no steps."""
    graders = current_graders(reads.stored_datasets(store))
    return cut_rows(reads.correct_traces_with_steps(store, graders, SEGMENTER_VERSION, teacher, dataset), limit)


def cut_rows(rows: pl.DataFrame, limit: int | None) -> tuple[pl.DataFrame, int]:
    """A cell's correct traces (`correct_traces_with_steps`) less those with no steps, the first
    `limit`; and how many had no steps."""
    empty = rows.filter(rows["m"] == 0).height
    rows = rows.filter(rows["m"] >= 1)
    if limit is not None:
        rows = rows.filter(rows["rn"] <= limit)
    return rows, empty


def load_transfer_traces(store: Store, rows: pl.DataFrame, teacher: str | None = None,
                         dataset: str | None = None) -> list[TransferTrace]:
    """The traces of `rows` (from `transfer_rows`, of `teacher` and `dataset` when given) with problem
    and steps, in the rows' order."""
    ids = rows["trace_id"].to_list()
    if not ids:
        return []
    with gc_paused():
        return _build_transfer_traces(store, rows, ids, teacher, dataset)


def _build_transfer_traces(store: Store, rows: pl.DataFrame, ids: list[str], teacher: str | None,
                           dataset: str | None) -> list[TransferTrace]:
    x = reads.transfer_inputs(store, ids, teacher, dataset)
    inputs = dict(zip(x["trace_id"].to_list(), zip(x["reasoning"].to_list(), x["question"].to_list(),
                                                    x["gold"].to_list(), x["choices"].to_list(), strict=True),
                      strict=True))
    spans = reads.step_spans(store, ids, SEGMENTER_VERSION)
    out = []
    for tid, t, d, pid in zip(ids, rows["teacher"].to_list(), rows["dataset"].to_list(), rows["problem_id"].to_list(),
                              strict=True):
        reasoning, question, gold, choices = inputs[tid]
        problem = Problem(d, pid, question, gold, tuple(json.loads(choices)) if choices else ())
        out.append(TransferTrace(tid, t, d, problem, Steps(reasoning, tuple(spans[tid]))))
    return out
