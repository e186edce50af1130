"""Transfer utility for a whole store at once: the vectorised form of `legival_core.transfer.metrics`.

`transfer.metrics.trace_transfer` is the reference definition (SPEC section 4) and works on one
(trace, student) at a time. A report over millions of rollouts cannot afford a Python call per trace,
so this module evaluates the same formulas on arrays: one row per (trace, student) pair, the trace
curves f(1..B) as one (pairs x B) matrix. `tests/test_reports_transfer.py` checks that every value
equals the reference functions on random traces, overflow and missing depths included.

Input rows are depths: one row per (tix, six, k), where `tix` indexes the trace table and `six` the
student table (integers keep 5 million rows small), with `m` and `y` = mean correctness of the `ok`
samples at that depth (null when every sample at the depth overflowed: the depth is then not observed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.transfer.metrics import N_BINS

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

PAIR_COUNT_COLUMNS = ("n_rollouts", "n_overflow", "n_forced", "n_rollout_unparsed")


@dataclass(frozen=True, slots=True)
class TransferTable:
    """Per-(trace, student) transfer results.

    `pairs` has one row per (tix, six) with `has_curve`, `fotu`, `tau`, `rr`, `rr_count`,
    `n_transitions`, `y0` (correctness at k = 0, the student's baseline) and the rollout counts;
    `curves[i]` is f(1..B) of `pairs` row i (NaN rows where the pair has no curve).
    """

    pairs: pl.DataFrame
    curves: np.ndarray
    n_bins: int


def empty_depths() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(
        schema={"tix": pl.Int64, "six": pl.Int64, "k": pl.Int64, "m": pl.Int64, "y": pl.Float64,
                **{c: pl.Int64 for c in PAIR_COUNT_COLUMNS}}
    )


def transfer_table(depths: pl.DataFrame, n_bins: int = N_BINS) -> TransferTable:
    """Trace curves, FOTU, first success, RR and baseline of every (trace, student) (SPEC section 4).

    Same rules as `trace_transfer`: a pair whose depth 0 or depth m is not observed has no curve, and
    then no FOTU, tau or RR either (an overflow removes a tail of depths).
    """
    import numpy as np
    import polars as pl

    d = depths.sort("tix", "six", "k")
    for c in PAIR_COUNT_COLUMNS:
        if c not in d.columns:
            d = d.with_columns(pl.lit(0, pl.Int64).alias(c))
    d = d.with_columns(
        (pl.col("tix").cast(pl.Int64) * (pl.col("six").max() + 1) + pl.col("six")).rle_id().alias("_p")
    )
    pairs = (
        d.group_by("_p", maintain_order=True)
        .agg(pl.col("tix").first(), pl.col("six").first(), *[pl.col(c).sum() for c in PAIR_COUNT_COLUMNS])
        .drop("_p")
    )
    n_pairs = pairs.height
    obs = d.filter(pl.col("y").is_not_null())
    p = obs["_p"].to_numpy().astype(np.int64)
    k = obs["k"].to_numpy().astype(np.int64)
    m = obs["m"].to_numpy().astype(np.int64)
    y = obs["y"].to_numpy().astype(np.float64)
    if len(k) and ((m < 1).any() or (k < 0).any() or (k > m).any()):
        raise ValueError("rollout depths must satisfy 0 <= k <= m and m >= 1")
    if len(y) and ((y < 0).any() or (y > 1).any()):
        raise ValueError("y_k is a mean correctness in [0, 1]")
    width = n_bins + 1
    bins = np.where(k == 0, 0, (n_bins * k + m - 1) // np.maximum(m, 1))
    flat = p * width + bins
    sums = np.bincount(flat, weights=y, minlength=n_pairs * width).reshape(n_pairs, width)
    cnt = np.bincount(flat, minlength=n_pairs * width).reshape(n_pairs, width)
    has0 = np.zeros(n_pairs, bool)
    has0[p[k == 0]] = True
    hasm = np.zeros(n_pairs, bool)
    hasm[p[k == m]] = True
    valid = has0 & hasm

    curves = np.full((n_pairs, n_bins), np.nan)
    if valid.any():
        observed = cnt[valid] > 0
        vals = np.where(observed, sums[valid] / np.maximum(cnt[valid], 1), 0.0)
        idx = np.arange(width)
        left = np.maximum.accumulate(np.where(observed, idx, -1), axis=1)
        right = np.minimum.accumulate(np.where(observed, idx, width)[:, ::-1], axis=1)[:, ::-1]
        right = np.minimum(right, n_bins)  # bin B is observed for every valid pair; guards the take
        vl = np.take_along_axis(vals, left, axis=1)
        vr = np.take_along_axis(vals, right, axis=1)
        span = np.where(right == left, 1, right - left)
        interp = vl + (vr - vl) * (idx - left) / span
        curves[valid] = np.where(observed, vals, interp)[:, 1:]
    fotu = np.where(valid, curves.sum(axis=1) / n_bins, np.nan)

    success = (k >= 1) & (y == 1.0)
    tau = np.full(n_pairs, n_bins + 1, np.int64)
    np.minimum.at(tau, p[success], bins[success])
    tau_defined = valid & (tau <= n_bins)

    same = p[1:] == p[:-1]
    drops = same & (y[1:] < y[:-1])
    rr_count = np.bincount(p[1:][drops], minlength=n_pairs)
    n_trans = np.bincount(p, minlength=n_pairs) - 1
    rr_defined = valid & (n_trans >= 1)
    rr = np.where(rr_defined, rr_count / np.maximum(n_trans, 1), np.nan)

    y0 = np.full(n_pairs, np.nan)
    y0[p[k == 0]] = y[k == 0]

    pairs = pairs.with_columns(
        pl.Series("has_curve", valid),
        pl.Series("fotu", fotu, nan_to_null=True),
        pl.Series("tau", np.where(tau_defined, tau, 0)).cast(pl.Int64),
        pl.Series("rr", rr, nan_to_null=True),
        pl.Series("rr_count", np.where(valid, rr_count, 0)).cast(pl.Int64),
        pl.Series("n_transitions", np.where(valid, np.maximum(n_trans, 0), 0)).cast(pl.Int64),
        pl.Series("y0", y0, nan_to_null=True),
    ).with_columns(
        pl.when(pl.Series(tau_defined)).then(pl.col("tau")).otherwise(None).alias("tau"),
        pl.when(pl.col("has_curve")).then(pl.col("rr_count")).otherwise(None).alias("rr_count"),
    )
    return TransferTable(pairs=pairs, curves=curves, n_bins=n_bins)


def sotu_from_taus(frame: pl.DataFrame, keys: list[str], n_bins: int = N_BINS) -> pl.DataFrame:
    """SOTU = H(h) / ln(B) per group from a frame with a `tau` column (null taus left out), and
    `n_sotu`, the number of traces it rests on (SPEC section 4). Groups with no tau get null."""
    import math

    import polars as pl

    hist = frame.filter(pl.col("tau").is_not_null()).group_by(*keys, "tau").agg(pl.len().alias("_c"))
    ent = (
        hist.with_columns((pl.col("_c") / pl.col("_c").sum().over(keys)).alias("_h"))
        .group_by(*keys)
        .agg(
            (-(pl.col("_h") * pl.col("_h").log()).sum() / math.log(n_bins) + 0.0).alias("sotu"),
            pl.col("_c").sum().cast(pl.Int64).alias("n_sotu"),
        )
    )
    groups = frame.select(keys).unique()
    return groups.join(ent, on=keys, how="left").with_columns(pl.col("n_sotu").fill_null(0))


def group_curves(curves: np.ndarray, group_index: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise mean curve per group over the rows with a curve (NaN rows skipped), and the count."""
    import numpy as np
    from scipy import sparse

    have = ~np.isnan(curves[:, 0]) if curves.size else np.zeros(len(group_index), bool)
    rows = np.flatnonzero(have)
    n_bins = curves.shape[1]
    if not len(rows):
        return np.full((n_groups, n_bins), np.nan), np.zeros(n_groups, np.int64)
    member = sparse.csr_matrix(
        (np.ones(len(rows)), (group_index[rows], np.arange(len(rows)))), shape=(n_groups, len(rows))
    )
    sums = np.asarray(member @ curves[rows])
    n = np.bincount(group_index[rows], minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / n[:, None]
    means[n == 0] = np.nan
    return means, n
