"""The Goodhart watch (docs/reward.md): is the policy learning to be legible, or to please the reward's
student?

Optimising against a monitor can teach a model to satisfy that monitor rather than to do what it
measures (Baker et al. 2025, "Monitoring reasoning models for misbehavior"). The transfer component
scores a completion by how well ONE student continues its prefixes; the watch student reads the same
prefixes and is never part of the reward. A policy that gets more legible helps both; one that learns
the reward student's quirks helps that student only, and the gap between the two widens.

`watch_table` buckets the logged items by training step (by time order when no step was logged) and
gives per bucket the mean reward, correctness, transfer, watch and gap (transfer - watch, over the
correct completions, where both are the students' FOTU: SPEC §4 leaves incorrect ones out) with a
bootstrap band over items. `gap_change` compares the last bucket's gap with the first's: widening
when its bootstrap interval lies above 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.intervals import interval_1d

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

SERIES = ("reward", "correct", "transfer", "watch", "gap")
"""The columns of the table, each with its mean and band (`<name>`, `<name>_low`, `<name>_high`)."""


@dataclass(frozen=True, slots=True)
class GapChange:
    first: float | None
    last: float | None
    change: float | None
    low: float | None
    high: float | None
    widening: bool
    n_first: int
    n_last: int


def bucketed(rows: pl.DataFrame, buckets: int) -> pl.DataFrame:
    """`rows` with `bucket` (0-based) and `step_from`, `step_to`: one bucket per logged step when there
    are at most `buckets` of them, else equal ranges of steps; rows without a step are placed by
    their order in time (then a step is their index)."""
    import polars as pl

    if rows.height == 0:
        return rows.with_columns(pl.lit(0).alias("bucket"), pl.lit(0).alias("x"))
    x = (pl.col("step").cast(pl.Int64) if rows["step"].null_count() == 0
         else pl.int_range(0, pl.len(), dtype=pl.Int64))
    rows = rows.sort("scored_at").with_columns(x.alias("x"))
    distinct = rows["x"].unique().sort().to_list()
    if len(distinct) <= buckets:
        index = {v: i for i, v in enumerate(distinct)}
        return rows.with_columns(pl.col("x").replace_strict(index, return_dtype=pl.Int64).alias("bucket"))
    lo, hi = distinct[0], distinct[-1]
    width = (hi - lo + 1) / buckets
    return rows.with_columns(((pl.col("x") - lo) / width).floor().cast(pl.Int64).clip(0, buckets - 1).alias("bucket"))


def _values(rows: pl.DataFrame) -> dict[str, np.ndarray]:
    import numpy as np

    correct = rows["correct"].fill_null(False).to_numpy()
    both = correct & rows["transfer"].is_not_null().to_numpy() & rows["watch"].is_not_null().to_numpy()
    gap = rows["transfer"].fill_null(0.0).to_numpy() - rows["watch"].fill_null(0.0).to_numpy()
    return {"reward": rows["reward"].drop_nulls().to_numpy().astype(float),
            "correct": correct.astype(float),
            "transfer": rows.filter(pl_col_true(correct))["transfer"].drop_nulls().to_numpy().astype(float),
            "watch": rows.filter(pl_col_true(correct))["watch"].drop_nulls().to_numpy().astype(float),
            "gap": np.asarray(gap[both], dtype=float)}


def pl_col_true(mask: np.ndarray) -> pl.Series:
    import polars as pl

    return pl.Series(mask.astype(bool))


def _band(values: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[float | None, float | None, float | None]:

    if values.size == 0:
        return None, None, None
    mean = float(values.mean())
    if resamples <= 0 or values.size < 2:
        return mean, None, None
    draws = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    low, high = interval_1d(draws)
    return mean, low, high


def watch_table(rows: pl.DataFrame, buckets: int = 10, resamples: int = 1000, seed: int = 0) -> pl.DataFrame:
    """Per bucket (module docstring): bucket, step_from, step_to, n, n_correct, and for each of
    `SERIES` its mean with a 95% bootstrap band over the bucket's items."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    out = []
    b = bucketed(rows, buckets)
    for bucket in sorted(b["bucket"].unique().to_list()) if b.height else []:
        part = b.filter(pl.col("bucket") == bucket)
        values = _values(part)
        row: dict[str, object] = {"bucket": int(bucket), "step_from": int(part["x"].min()),  # type: ignore[arg-type]
                                  "step_to": int(part["x"].max()), "n": part.height,  # type: ignore[arg-type]
                                  "n_correct": int(part["correct"].fill_null(False).sum())}
        for name in SERIES:
            row[name], row[f"{name}_low"], row[f"{name}_high"] = _band(values[name], rng, resamples)
        out.append(row)
    schema: dict[str, object] = {"bucket": pl.Int64, "step_from": pl.Int64, "step_to": pl.Int64, "n": pl.Int64,
                                 "n_correct": pl.Int64}
    for name in SERIES:
        schema |= {name: pl.Float64, f"{name}_low": pl.Float64, f"{name}_high": pl.Float64}
    return pl.DataFrame(out, schema=schema)  # type: ignore[arg-type]


def gap_change(rows: pl.DataFrame, buckets: int = 10, resamples: int = 1000, seed: int = 0) -> GapChange:
    """The last bucket's gap minus the first's, with a bootstrap interval (items resampled within each
    bucket); widening when the interval's low end is above 0."""
    import numpy as np
    import polars as pl

    b = bucketed(rows, buckets)
    if b.height == 0:
        return GapChange(None, None, None, None, None, False, 0, 0)
    first = _values(b.filter(pl.col("bucket") == b["bucket"].min()))["gap"]
    last = _values(b.filter(pl.col("bucket") == b["bucket"].max()))["gap"]
    if first.size == 0 or last.size == 0 or b["bucket"].min() == b["bucket"].max():
        return GapChange(float(first.mean()) if first.size else None, float(last.mean()) if last.size else None,
                         None, None, None, False, int(first.size), int(last.size))
    change = float(last.mean() - first.mean())
    rng = np.random.default_rng(seed)
    draws = (last[rng.integers(0, last.size, size=(resamples, last.size))].mean(axis=1)
             - first[rng.integers(0, first.size, size=(resamples, first.size))].mean(axis=1))
    low, high = interval_1d(draws)
    return GapChange(float(first.mean()), float(last.mean()), change, low, high, low is not None and low > 0, int(first.size),
                     int(last.size))
