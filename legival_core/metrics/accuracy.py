"""Accuracy (SPEC section 4): the share of a teacher's traces graded correct by the current grader of
their dataset; every trace counts (an unparsed or truncated answer is wrong, never dropped)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.metrics.base import metric

if TYPE_CHECKING:
    import polars as pl


def with_accuracy(traces: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return traces.with_columns(pl.col("correct").fill_null(False).cast(pl.Float64).alias("accuracy"))


metric("accuracy", unit="fraction", direction="higher", section="SPEC §4", stage="grade", source="derived",
       derive=with_accuracy, complete_only=False, order=100,
       description="share of traces graded correct (every trace counts)")
