"""Which backtracking number a trace reports: the LLM judge's where it has an `ok` result, else the
lexical fallback (SPEC section 3: every row records the method that produced it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from legival_core.store import Store


def judge_backtracking(store: Store) -> pl.DataFrame:
    """trace_id -> (judge_fraction, judge_method) from the newest `ok` judge result per trace.

    `judge_method` is "judge:<judge>/<model>" so a report says which judge produced each number.
    Failed or overflowing judge results never count as "no backtracking": those traces fall back.
    """
    return store.query(
        """
        SELECT trace_id, fraction AS judge_fraction,
               'judge:' || judge || '/' || model AS judge_method
        FROM judge_results
        WHERE status = 'ok' AND fraction IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY created_at DESC, judge_key) = 1
        """
    )


def prefer_judge(traces: pl.DataFrame, judged: pl.DataFrame) -> pl.DataFrame:
    """Replace `backtracking`/`backtracking_method` by the judge's where a judge result exists."""
    import polars as pl

    if judged.height == 0:
        return traces
    return (
        traces.join(judged, on="trace_id", how="left")
        .with_columns(
            pl.coalesce("judge_fraction", "backtracking").alias("backtracking"),
            pl.coalesce("judge_method", "backtracking_method").alias("backtracking_method"),
        )
        .drop("judge_fraction", "judge_method")
    )
