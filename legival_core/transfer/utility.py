"""Transfer utility (SPEC section 4): bins, trace curves, FOTU, first success, SOTU, regression rate.

ONE implementation, vectorised: a report over millions of rollouts evaluates the formulas on arrays
(one row per (trace, student) pair, the trace curves f(1..B) as one pairs x B matrix), and the
per-trace functions at the bottom (`trace_transfer`, `sotu`, `bin_of`) call exactly that code on one
pair, so the definition that the hand-computed tests check is the code the report runs.

Input rows are depths: one row per (tix, six, k), where `tix` indexes the trace table and `six` the
student table (integers keep 5 million rows small), with `m` and `y` = mean correctness of the `ok`
samples at that depth (null when every sample at the depth overflowed: the depth is not observed).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def bins_of(k: np.ndarray, m: np.ndarray, n_bins: int) -> np.ndarray:
    """bin(k) = ceil(B*k/m) = (B*k + m - 1) // m for k >= 1, 0 for the anchor k = 0 (SPEC section 4,
    "Bins"); integer arithmetic, so k/m on a bin edge never drifts across it."""
    import numpy as np

    return np.where(k == 0, 0, (n_bins * k + m - 1) // np.maximum(m, 1))


def empty_depths() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(
        schema={"tix": pl.Int64, "six": pl.Int64, "k": pl.Int64, "m": pl.Int64, "y": pl.Float64,
                **{c: pl.Int64 for c in PAIR_COUNT_COLUMNS}}
    )


def transfer_table(depths: pl.DataFrame, n_bins: int, open_ends: Collection[int] = ()) -> TransferTable:
    """Trace curves, FOTU, first success, RR and baseline of every (trace, student) (SPEC section 4).

    A pair whose depth 0 (the anchor) or depth m (bin B) is not observed has no curve, and then no
    FOTU, tau or RR either: prompts grow with k, so an overflow removes a tail of depths, and a first
    success that may lie in that tail can be neither observed nor ruled out. Unobserved bins between
    observed ones are linearly interpolated in b; several depths in one bin are averaged.

    `open_ends`: the students (`six`) whose depths are a chosen subset of K (the human student: a study
    asks a few fractions, never k = 0), not a tail lost to overflow. Their pairs have a curve as soon
    as one depth is observed, computed on the observed depths alone: the same interpolation between
    observed bins, and before the first (after the last) observed bin the curve stays at that bin's
    value (no anchor to interpolate from). First success and RR run over the observed depths as over
    K (RR's denominator: observed depths - 1; undefined with one); the baseline y0 is null without k = 0.
    """
    import numpy as np
    import polars as pl

    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
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
    bins = bins_of(k, m, n_bins)
    flat = p * width + bins
    sums = np.bincount(flat, weights=y, minlength=n_pairs * width).reshape(n_pairs, width)
    cnt = np.bincount(flat, minlength=n_pairs * width).reshape(n_pairs, width)
    has0 = np.zeros(n_pairs, bool)
    has0[p[k == 0]] = True
    hasm = np.zeros(n_pairs, bool)
    hasm[p[k == m]] = True
    valid = has0 & hasm
    if open_ends:
        is_open = np.isin(pairs["six"].to_numpy(), np.fromiter(open_ends, np.int64))
        valid |= is_open & (np.bincount(p, minlength=n_pairs) > 0)

    curves = np.full((n_pairs, n_bins), np.nan)
    if valid.any():
        observed = cnt[valid] > 0
        vals = np.where(observed, sums[valid] / np.maximum(cnt[valid], 1), 0.0)
        idx = np.arange(width)
        left = np.maximum.accumulate(np.where(observed, idx, -1), axis=1)
        right = np.minimum.accumulate(np.where(observed, idx, width)[:, ::-1], axis=1)[:, ::-1]
        # an anchored pair has bins 0 and B observed: both sides always exist. An open-ended pair
        # has at least one observed bin: a missing side takes the other (the curve stays flat there).
        left, right = np.where(left < 0, right, left), np.where(right >= width, left, right)
        right = np.minimum(right, n_bins)  # guards the take
        vl = np.take_along_axis(vals, left, axis=1)
        vr = np.take_along_axis(vals, right, axis=1)
        span = np.where(right == left, 1, right - left)
        interp = vl + (vr - vl) * (idx - left) / span
        curves[valid] = np.where(observed, vals, interp)[:, 1:]
    fotu = np.where(valid, fotu_of(curves), np.nan)

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


def fotu_of(curves: np.ndarray) -> np.ndarray:
    """FOTU = (1/B) * sum_{b=1..B} f(b), per row of a (pairs x B) curve matrix (SPEC section 4)."""
    result: np.ndarray = curves.sum(axis=1) / curves.shape[1]
    return result


def sotu_from_taus(frame: pl.DataFrame, keys: list[str], n_bins: int) -> pl.DataFrame:
    """SOTU = H(h) / ln(B) per group from a frame with a `tau` column (null taus left out), and
    `n_sotu`, the number of traces it rests on (SPEC section 4). h(b) is the share of the group's
    traces whose first success is bin b; groups with no tau get null."""
    import polars as pl

    if n_bins < 2:
        raise ValueError(f"SOTU divides by ln(B); n_bins must be >= 2, got {n_bins}")
    # sorted, and grouped in that order: the entropy's sum runs in one order whatever the hash
    # order of the group_by (a change of module layout alone once moved SOTU by 1e-16)
    hist = (frame.filter(pl.col("tau").is_not_null()).group_by(*keys, "tau").agg(pl.len().alias("_c"))
            .sort(*keys, "tau"))
    ent = (
        hist.with_columns((pl.col("_c") / pl.col("_c").sum().over(keys)).alias("_h"))
        .group_by(*keys, maintain_order=True)
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


# --- one (trace, student) at a time: the same code on one pair ----------------------------------------


@dataclass(frozen=True, slots=True)
class TraceTransfer:
    """Per-(trace, student) transfer results; curve, fotu, tau, rr and rr_count are None when the
    trace has no curve (depth 0 or m not observed). `y0` is the student's correctness at k = 0."""

    curve: tuple[float, ...] | None
    fotu: float | None
    tau: int | None
    rr: float | None
    rr_count: int | None
    n_transitions: int
    y0: float | None


@dataclass(frozen=True, slots=True)
class SotuResult:
    """SOTU of one (teacher, dataset, student) and the number of traces with a first success."""

    value: float | None
    n_traces: int


def bin_of(k: int, m: int, n_bins: int) -> int:
    """Bin of depth k in a trace of m steps (`bins_of`'s formula on one depth, with range checks; plain
    integers, since a plan calls it once per rollout)."""
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if not 0 <= k <= m:
        raise ValueError(f"depth k must be in 0..m={m}, got {k}")
    return 0 if k == 0 else (n_bins * k + m - 1) // m


def trace_transfer(y_by_k: Mapping[int, float], m: int, n_bins: int, open_ends: bool = False) -> TraceTransfer:
    """Every per-(trace, student) metric of SPEC section 4 from the observed y_k (depth -> mean
    correctness; an absent depth is not observed), computed by `transfer_table` on this one pair
    (`open_ends`: the depths are a chosen subset, as the human student's: `transfer_table`)."""
    import polars as pl

    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    ks = sorted(y_by_k)
    depths = pl.DataFrame(
        {"tix": [0] * len(ks), "six": [0] * len(ks), "k": ks, "m": [m] * len(ks),
         "y": [float(y_by_k[k]) for k in ks]},
        schema={"tix": pl.Int64, "six": pl.Int64, "k": pl.Int64, "m": pl.Int64, "y": pl.Float64},
    )
    t = transfer_table(depths, n_bins, (0,) if open_ends else ())
    if t.pairs.height == 0:
        return TraceTransfer(None, None, None, None, None, 0, None)
    row = t.pairs.row(0, named=True)
    curve = tuple(float(v) for v in t.curves[0]) if row["has_curve"] else None
    return TraceTransfer(curve, row["fotu"], row["tau"], row["rr"], row["rr_count"], row["n_transitions"], row["y0"])


def trace_curve(y_by_k: Mapping[int, float], m: int, n_bins: int) -> tuple[float, ...]:
    """The trace curve f(1..B); ValueError when depth 0 or depth m is not observed (no extrapolation)."""
    curve = trace_transfer(y_by_k, m, n_bins).curve
    if curve is None:
        end = "k = 0 (the anchor)" if 0 not in y_by_k else f"k = m = {m} (bin B)"
        raise ValueError(f"depth {end} is not observed; the curve is undefined")
    return curve


def sotu(taus: Sequence[int | None], n_bins: int) -> SotuResult:
    """SOTU = H(h) / ln(B) of a group's first-success bins (None taus left out): `sotu_from_taus`
    on one group. All taus in one bin give 0; taus spread evenly over all B bins give 1."""
    import polars as pl

    for t in taus:
        if t is not None and not 1 <= t <= n_bins:
            raise ValueError(f"tau must be a bin in 1..{n_bins}, got {t}")
    frame = pl.DataFrame({"g": [0] * len(taus), "tau": list(taus)}, schema={"g": pl.Int64, "tau": pl.Int64})
    if frame.height == 0:
        frame = pl.DataFrame({"g": [0], "tau": [None]}, schema={"g": pl.Int64, "tau": pl.Int64})
    row = sotu_from_taus(frame, ["g"], n_bins).row(0, named=True)
    return SotuResult(row["sotu"], int(row["n_sotu"]))
