"""What a study is designed from: the store's transfer traces (SPEC section 4: graded correct by the
current grader of their dataset, complete, m >= 1 steps, the same rows `legival transfer` rolls out),
with `answer_first`, the first step that states the gold answer (`transfer.step_events.stated`, the cheap
detection of the step_events stage: the dataset grader's own reading of a step holding the gold as a token).

The text is read only to find `answer_first`, and only for a seeded sample of `PROBE` traces: an
attention check needs a few dozen such traces, not every trace's text of a paper-scale store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.datasets.base import current_graders
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import planner
from legival_core.store.db import Store
from legival_core.transfer.step_events import stated

if TYPE_CHECKING:
    import polars as pl

PROBE = 2000
"""At most this many traces (a seeded sample) are read to find the ones stating their gold."""


def transfer_candidates(store: Store, teachers: tuple[str, ...] | None = None) -> pl.DataFrame:
    """trace_id, teacher, dataset, problem_id, m of the transfer traces (of `teachers`, None: all)."""
    import polars as pl

    graders = current_graders(planner.stored_datasets(store))
    rows = planner.correct_traces_with_steps(store, graders, SEGMENTER_VERSION, None, None)
    rows = rows.filter(pl.col("m") >= 1)
    if teachers is not None:
        rows = rows.filter(pl.col("teacher").is_in(list(teachers)))
    return rows.select("trace_id", "teacher", "dataset", "problem_id", "m")


def with_answer_first(store: Store, rows: pl.DataFrame, seed: int, probe: int = PROBE) -> pl.DataFrame:
    """`rows` plus `answer_first` (Int64: the first step stating the gold; null: none, or not probed)."""
    import numpy as np
    import polars as pl

    if rows.height == 0:
        return rows.with_columns(pl.lit(None, pl.Int64).alias("answer_first"))
    ordered = rows.sort("trace_id")
    pick = np.sort(np.random.default_rng(seed).permutation(ordered.height)[:probe])
    ids = ordered["trace_id"].gather(pl.Series(pick)).to_list()
    texts = planner.transfer_inputs(store, ids)
    spans = planner.step_spans(store, ids, SEGMENTER_VERSION)
    by_id = {r["trace_id"]: r for r in texts.iter_rows(named=True)}
    ds = dict(zip(ordered["trace_id"].to_list(), ordered["dataset"].to_list(), strict=True))
    step_text, step_row, step_idx = [], [], []
    kept = [t for t in ids if t in by_id]
    for row, tid in enumerate(kept):
        text = by_id[tid]["reasoning"]
        for j, (a, b) in enumerate(spans[tid], start=1):
            step_text.append(text[a:b])
            step_row.append(row)
            step_idx.append(j)
    _, first = stated(pl.Series(step_text, dtype=pl.Utf8), np.array(step_row, np.int64), np.array(step_idx, np.int64),
                      [ds[t] for t in kept], [by_id[t]["gold"] for t in kept])
    found = pl.DataFrame({"trace_id": kept, "answer_first": [int(f) or None for f in first]},
                         schema={"trace_id": pl.Utf8, "answer_first": pl.Int64})
    return rows.join(found, on="trace_id", how="left")
