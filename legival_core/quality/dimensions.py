"""Dimension scores and the Global Index (gCoT paper; SPEC section 6), as pure functions over polars.

Input: one row per teacher (optionally per teacher and dataset) with the teacher-level MEAN of each
quality metric. For each metric present: min-max across the teachers of a group,
``(x - min) / (max - min)``, inverted (``1 - .``) for metrics where lower is better (perplexity); 0.5
for every teacher when all are equal (no information); null stays null. A dimension is the mean of
its normalised metrics that are present (null when none is); the Global Index is the mean of the
dimensions that are present, and `n_dimensions` says how many that was. Which metric belongs to
which dimension, and which are inverted, is registered in `legival_core/metrics/quality.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl



def minmax_across_teachers(
    table: pl.DataFrame, metrics: Sequence[str], group_by: Sequence[str], invert: frozenset[str]
) -> pl.DataFrame:
    """Adds `<metric>_norm` for every metric column present."""
    import polars as pl

    exprs = []
    for m in metrics:
        if m not in table.columns:
            continue
        x = pl.col(m).cast(pl.Float64)
        lo, hi = x.min(), x.max()
        if group_by:
            lo, hi = lo.over(list(group_by)), hi.over(list(group_by))
        norm = pl.when(x.is_null()).then(None).when(hi > lo).then((x - lo) / (hi - lo)).otherwise(0.5)
        exprs.append((1.0 - norm if m in invert else norm).alias(f"{m}_norm"))
    return table.with_columns(exprs) if exprs else table


def dimension_scores(
    table: pl.DataFrame,
    dimensions: Mapping[str, Sequence[str]],
    group_by: Sequence[str],
    invert: frozenset[str],
) -> pl.DataFrame:
    """Adds `<metric>_norm`, `dim_<dimension>`, `global_index` and `n_dimensions`."""
    import polars as pl

    all_metrics = [m for ms in dimensions.values() for m in ms]
    out = minmax_across_teachers(table, all_metrics, group_by, invert)
    dim_cols = []
    for dim, ms in dimensions.items():
        cols = [f"{m}_norm" for m in ms if f"{m}_norm" in out.columns]
        name = f"dim_{dim}"
        expr = pl.mean_horizontal([pl.col(c) for c in cols]) if cols else pl.lit(None, dtype=pl.Float64)
        out = out.with_columns(expr.alias(name))
        dim_cols.append(name)
    return out.with_columns(
        pl.mean_horizontal([pl.col(c) for c in dim_cols]).alias("global_index"),
        pl.sum_horizontal([pl.col(c).is_not_null().cast(pl.Int32) for c in dim_cols]).alias("n_dimensions"),
    )


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (Pearson on average ranks); None below 3 pairs or for a constant side."""
    if len(x) != len(y) or len(x) < 3:
        return None
    rx, ry = _ranks(list(x)), _ranks(list(y))
    n = len(rx)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / (sxx * syy) ** 0.5


def dimension_correlations(table: pl.DataFrame, others: Sequence[str], scores: Sequence[str] | None = None) -> pl.DataFrame:
    """Spearman rho between each dimension score (and the Global Index) and each other teacher-level
    column, over the rows where both are present: columns score, other, rho, n."""
    import polars as pl

    scores = list(scores) if scores is not None else [c for c in table.columns if c.startswith("dim_")] + ["global_index"]
    rows = []
    for s in scores:
        for o in others:
            if s not in table.columns or o not in table.columns:
                continue
            pair = table.select(pl.col(s).cast(pl.Float64), pl.col(o).cast(pl.Float64)).drop_nulls()
            rows.append({"score": s, "other": o, "rho": spearman(pair[s].to_list(), pair[o].to_list()),
                         "n": pair.height})
    return pl.DataFrame(rows, schema={"score": pl.String, "other": pl.String, "rho": pl.Float64, "n": pl.Int64})
