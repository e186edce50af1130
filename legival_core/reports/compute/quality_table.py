"""Teacher-level text-quality columns (SPEC section 6): the mean of each gCoT metric, the Z3 extraction
rate, the normalised dimension members, the dimension scores and the Global Index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.quality.dimensions import dimension_scores
from legival_core.quality.group import dimensions, lower_is_better, quality_metrics
from legival_core.store import Store
from legival_core.store import report as reads

if TYPE_CHECKING:
    import polars as pl


def quality_teacher_table(store: Store, group_by: Sequence[str] = ("teacher", "dataset")) -> pl.DataFrame:
    """Teacher-level means of every quality metric (status 'ok' rows; per metric, the params and code
    version with the most rows), `z3_extraction_rate`, `<metric>_norm`, `dim_*`, `global_index`.
    Min-max runs across teachers within each dataset when `dataset` is in `group_by`."""
    import polars as pl

    keys = list(group_by)
    rows = reads.quality_rows(store, quality_metrics())
    base = reads.teacher_datasets(store).select(keys).unique(maintain_order=True)
    dims = [k for k in keys if k != "teacher"]
    table = base
    if rows.height:
        ok = rows.filter(pl.col("status") == "ok")
        means = ok.group_by([*keys, "metric"]).agg(pl.col("value").mean()).pivot(
            on="metric", index=keys, values="value")
        z3 = rows.filter(pl.col("metric") == "z3_acs").group_by(keys).agg(
            (pl.col("status") != "unparsed").mean().alias("z3_extraction_rate"))
        table = table.join(means, on=keys, how="left").join(z3, on=keys, how="left")
    # one schema whatever ran: every registered metric is a column (empty where not computed)
    table = table.with_columns(pl.lit(None, pl.Float64).alias(c)
                               for c in (*quality_metrics(), "z3_extraction_rate") if c not in table.columns)
    table = table.select(*keys, *quality_metrics(), "z3_extraction_rate")
    return dimension_scores(table, dimensions(), dims, lower_is_better()).sort(keys)
