"""Bootstrap confidence intervals over problems for every teacher-level metric and rank (SPEC section 5).

One resample draws, for each dataset separately, as many problems as the dataset has, with
replacement (seeded `numpy.random.default_rng(seed)`); every trace and rollout of a drawn problem comes
along, once per draw. The whole report is then recomputed on the resample: per (teacher, dataset,
student), mean over students, mean over datasets.

Vectorised: a resample is a vector w of per-problem draw counts, and every mean in the report is a
ratio of per-problem sums, so the sums for all resamples at once are one matrix product W @ A, with
W (resamples x problems) and A (problems x features: numerators, denominators, curve sums and the
first-success histograms). SOTU is the entropy of a resampled histogram; medians are weighted medians.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from legival_core.intervals import CI_LEVEL, percentile_interval
from legival_core.metrics.base import Direction, MetricInfo, all_metrics
from legival_core.reports.compute.stats import rank_values
from legival_core.reports.compute.trace_table import trace_level_metrics

if TYPE_CHECKING:
    import numpy as np
    import polars as pl


_PAIR_MEANS = {"fotu": "fotu", "regression_rate": "rr", "rr_count": "rr_count", "student_baseline_acc": "y0"}
"""Transfer column -> the per-(trace, student) column of the pair frame it averages (SOTU apart)."""


def ci_metrics() -> list[str]:
    """Every teacher-level metric recomputed on the resamples (those that come from traces/rollouts)."""
    return [m.name for m in all_metrics() if m.bootstrapped and m.in_teacher_dataset and not m.family]


def ranked_ci_metrics() -> dict[str, Direction]:
    """The bootstrapped metrics that are ranked: they get rank intervals and pairwise tests."""
    return {m.name: m.direction for m in all_metrics()
            if m.bootstrapped and m.in_teacher_dataset and m.ranked and m.direction is not None}


def _trace_means() -> list[MetricInfo]:
    return [m for m in trace_level_metrics() if m.aggregate == "mean"]


def _medians() -> list[MetricInfo]:
    return [m for m in trace_level_metrics() if m.aggregate == "median"]

Draw = Callable[[int, int], "np.ndarray"]
"""draw(dataset number, number of problems) -> (resamples x problems) draw counts."""


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """`samples[metric]` is (resamples x teachers); `curves` is (resamples x teachers x B);
    `dataset_samples[dataset][metric]` is (resamples x teachers) on that dataset alone (NaN for a
    teacher without traces there): the run records keep them (`runs.record`)."""

    teachers: list[str]
    samples: dict[str, np.ndarray]
    curves: np.ndarray
    n_resamples: int
    seed: int
    dataset_samples: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def multinomial_draw(n_resamples: int, seed: int) -> Draw:
    import numpy as np

    rng = np.random.default_rng(seed)

    def draw(_d: int, n_problems: int) -> np.ndarray:
        idx = rng.integers(0, n_problems, size=(n_resamples, n_problems))
        flat = idx + (np.arange(n_resamples) * n_problems)[:, None]
        return np.bincount(flat.ravel(), minlength=n_resamples * n_problems).reshape(n_resamples, n_problems)

    return draw


def bootstrap(
    traces: pl.DataFrame,
    pairs: pl.DataFrame,
    curves: np.ndarray,
    n_resamples: int,
    seed: int,
    n_bins: int,
    draw: Draw | None = None,
) -> BootstrapResult:
    """Teacher-level metrics and mu_T(b) on every resample.

    `traces` is an indexed trace table (`aggregate.index_traces`), `pairs` the matching
    `aggregate.pair_frame` and `curves` its trace curves. `draw` replaces the multinomial resampling
    (a draw of all ones reproduces the point estimates: the tests use that).
    """
    import numpy as np
    import polars as pl

    draw = draw or multinomial_draw(n_resamples, seed)
    teachers = sorted(traces["teacher"].unique().to_list())
    students = sorted(pairs["student"].unique().to_list()) if pairs.height else []
    datasets = sorted(traces["dataset"].unique().to_list())
    t_index = pl.DataFrame({"teacher": teachers, "ti": np.arange(len(teachers), dtype=np.int64)})
    s_index = pl.DataFrame({"student": students, "si": np.arange(len(students), dtype=np.int64)},
                           schema={"student": pl.Utf8, "si": pl.Int64})
    metrics = ci_metrics()
    per_dataset: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    curve_parts: list[np.ndarray] = []
    by_dataset: dict[str, dict[str, np.ndarray]] = {}
    n_r = n_resamples
    for di, dataset in enumerate(datasets):
        tr = traces.filter(pl.col("dataset") == dataset)
        problems = pl.DataFrame({"problem_id": sorted(tr["problem_id"].unique().to_list())}).with_row_index("pi")
        w = np.asarray(draw(di, problems.height), dtype=np.float64)
        n_r = w.shape[0]
        tr = tr.join(problems, on="problem_id").join(t_index, on="teacher")
        pr = pairs.filter(pl.col("dataset") == dataset)
        pr = pr.join(problems, on="problem_id").join(t_index, on="teacher").join(s_index, on="student")
        res = _dataset_resamples(tr, pr, curves, w, len(teachers), len(students), n_bins)
        for m in metrics:
            per_dataset[m].append(res[m])
        by_dataset[dataset] = {m: res[m] for m in metrics}
        curve_parts.append(res["_curve"])
    samples: dict[str, np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for m in metrics:
            stack = np.stack(per_dataset[m], axis=-1) if datasets else np.full((n_r, len(teachers), 1), np.nan)
            samples[m] = np.nanmean(stack, axis=-1)
        cstack = (np.stack(curve_parts, axis=-1) if datasets
                  else np.full((n_r, len(teachers), n_bins, 1), np.nan))
        mu = np.nanmean(cstack, axis=-1)
    return BootstrapResult(teachers, samples, mu, n_r, seed, by_dataset)


def _dataset_resamples(
    tr: pl.DataFrame, pr: pl.DataFrame, curves: np.ndarray, w: np.ndarray, n_t: int, n_s: int, n_bins: int
) -> dict[str, np.ndarray]:
    """(resamples x teachers) of every metric on one dataset, and (resamples x teachers x B) curves."""
    import numpy as np
    import polars as pl

    n_p = w.shape[1]
    eff = ~pl.col("truncated")
    means = _trace_means()
    trace_feats = {
        m.name: (pl.col(m.trace_column).cast(pl.Float64),
                 (eff if m.complete_only else pl.lit(True)) & pl.col(m.trace_column).is_not_null())
        for m in means
    }
    n_tf = len(means)
    pair_names = [n for n in _PAIR_MEANS if n in ci_metrics()]
    pair_feats = {n: pl.col(_PAIR_MEANS[n]) for n in pair_names}
    n_pf = len(pair_names)
    width_ts = 2 * n_pf + 2 * n_bins  # numerators/denominators, curve sums, tau histogram
    off_pairs = n_t * n_tf * 2
    n_feat = off_pairs + n_t * n_s * width_ts

    flat_parts: list[np.ndarray] = []
    weight_parts: list[np.ndarray] = []
    pi = tr["pi"].to_numpy().astype(np.int64)
    ti = tr["ti"].to_numpy().astype(np.int64)
    for f, name in enumerate(trace_feats):
        value, keep = trace_feats[name]
        vals = tr.select(pl.when(keep).then(value).otherwise(None).alias("v"))["v"].to_numpy().astype(np.float64)
        have = ~np.isnan(vals)
        col = (ti * n_tf + f) * 2
        flat_parts += [pi[have] * n_feat + col[have], pi[have] * n_feat + col[have] + 1]
        weight_parts += [vals[have], np.ones(int(have.sum()))]
    if pr.height:
        ppi = pr["pi"].to_numpy().astype(np.int64)
        base = off_pairs + (pr["ti"].to_numpy().astype(np.int64) * n_s + pr["si"].to_numpy().astype(np.int64)) * width_ts
        for f, name in enumerate(pair_names):
            vals = pr.select(pair_feats[name].cast(pl.Float64).alias("v"))["v"].to_numpy().astype(np.float64)
            have = ~np.isnan(vals)
            flat_parts += [ppi[have] * n_feat + base[have] + 2 * f, ppi[have] * n_feat + base[have] + 2 * f + 1]
            weight_parts += [vals[have], np.ones(int(have.sum()))]
        cv = curves[pr["_r"].to_numpy()]
        have = ~np.isnan(cv[:, 0]) if cv.size else np.zeros(pr.height, bool)
        cols = base[have, None] + 2 * n_pf + np.arange(n_bins)[None, :]
        flat_parts.append((ppi[have, None] * n_feat + cols).ravel())
        weight_parts.append(cv[have].ravel())
        tau = pr["tau"].fill_null(0).to_numpy().astype(np.int64)
        have = tau >= 1
        flat_parts.append(ppi[have] * n_feat + base[have] + 2 * n_pf + n_bins + tau[have] - 1)
        weight_parts.append(np.ones(int(have.sum())))
    flat = np.concatenate(flat_parts) if flat_parts else np.zeros(0, np.int64)
    weights = np.concatenate(weight_parts) if weight_parts else np.zeros(0)
    a = np.bincount(flat, weights=weights, minlength=n_p * n_feat).reshape(n_p, n_feat)
    z = w @ a
    del a

    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        zt = z[:, :off_pairs].reshape(w.shape[0], n_t, n_tf, 2)
        for f, name in enumerate(trace_feats):
            out[name] = _ratio(zt[:, :, f, 0], zt[:, :, f, 1])
        zp = z[:, off_pairs:].reshape(w.shape[0], n_t, n_s, width_ts)
        for f, name in enumerate(pair_names):
            per_student = _ratio(zp[..., 2 * f], zp[..., 2 * f + 1])
            out[name] = _nanmean(per_student, axis=2, shape=(w.shape[0], n_t))
        den = zp[..., 1]  # pairs with a FOTU are exactly the pairs with a curve
        curve = _ratio(zp[..., 2 * n_pf: 2 * n_pf + n_bins], den[..., None])
        out["_curve"] = _nanmean(curve, axis=2, shape=(w.shape[0], n_t, n_bins))
        hist = zp[..., 2 * n_pf + n_bins:]
        total = hist.sum(axis=-1, keepdims=True)
        h = hist / total
        ent = -np.where(h > 0, h * np.log(np.where(h > 0, h, 1.0)), 0.0).sum(axis=-1) / math.log(n_bins) + 0.0
        ent = np.where(total[..., 0] > 0, ent, np.nan)
        out["sotu"] = _nanmean(ent, axis=2, shape=(w.shape[0], n_t))
    for med in _medians():
        name, source = med.name, med.trace_column
        out[name] = np.full((w.shape[0], n_t), np.nan)
        sub = tr.filter(~pl.col("truncated") & pl.col(source).is_not_null())
        for t in sorted(set(sub["ti"].to_list())):
            part = sub.filter(pl.col("ti") == t)
            out[name][:, t] = weighted_median(
                part[source].cast(pl.Float64).to_numpy(), part["pi"].to_numpy().astype(np.int64), w
            )
    return out


def weighted_median(values: np.ndarray, problem: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Median of `values` when value i is repeated w[r, problem[i]] times, for every resample r: the
    mean of the two middle elements for an even count, as polars and numpy define the median."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    v = values[order]
    c = np.cumsum(w[:, problem[order]], axis=1)
    total = c[:, -1]
    lo = np.floor((total - 1) / 2)
    hi = np.floor(total / 2)
    i_lo = (c > lo[:, None]).argmax(axis=1)
    i_hi = (c > hi[:, None]).argmax(axis=1)
    med = (v[i_lo] + v[i_hi]) / 2
    return np.where(total > 0, med, np.nan)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _nanmean(x: np.ndarray, axis: int, shape: tuple[int, ...]) -> np.ndarray:
    import numpy as np

    if x.shape[axis] == 0:
        return np.full(shape, np.nan)
    return np.nanmean(x, axis=axis)


# --- summaries ----------------------------------------------------------------------------------------


def ci_table(result: BootstrapResult, level: float = CI_LEVEL) -> pl.DataFrame:
    """Per teacher: `<metric>_ci_low/high` for every metric and `rank_<metric>_ci_low/high` for every
    ranked metric (ranks recomputed on each resample, 1 = best)."""
    import polars as pl

    cols: dict[str, object] = {"teacher": result.teachers}
    for m in ci_metrics():
        lo, hi = percentile_interval(result.samples[m], level)
        cols[f"{m}_ci_low"], cols[f"{m}_ci_high"] = lo, hi
    for m, direction in ranked_ci_metrics().items():
        lo, hi = percentile_interval(rank_values(result.samples[m], direction), level)
        cols[f"rank_{m}_ci_low"], cols[f"rank_{m}_ci_high"] = lo, hi
    return pl.DataFrame(cols).fill_nan(None)


def rank_pairs(result: BootstrapResult, level: float = CI_LEVEL) -> pl.DataFrame:
    """For each ranked metric and pair of teachers: the share of resamples in which each is strictly
    better, and `distinguishable` = one of the two shares reaches `level` (0.95 by default: the
    paired bootstrap test at 5%). Resamples where either value is undefined are left out."""
    import numpy as np
    import polars as pl

    rows: list[tuple[Any, ...]] = []
    for m, direction in ranked_ci_metrics().items():
        x = result.samples[m]
        for a, b in combinations(range(len(result.teachers)), 2):
            both = ~(np.isnan(x[:, a]) | np.isnan(x[:, b]))
            n = int(both.sum())
            if n == 0:
                rows.append((m, result.teachers[a], result.teachers[b], None, None, None, 0))
                continue
            xa, xb = x[both, a], x[both, b]
            a_better = float(np.mean(xa > xb if direction == "higher" else xa < xb))
            b_better = float(np.mean(xb > xa if direction == "higher" else xb < xa))
            rows.append((m, result.teachers[a], result.teachers[b], a_better, b_better,
                         max(a_better, b_better) >= level, n))
    return pl.DataFrame(
        rows, orient="row",
        schema={"metric": pl.Utf8, "teacher_a": pl.Utf8, "teacher_b": pl.Utf8, "p_a_better": pl.Float64,
                "p_b_better": pl.Float64, "distinguishable": pl.Boolean, "n_resamples": pl.Int64},
    )


def indistinct_columns(pairs: pl.DataFrame, teachers: list[str]) -> pl.DataFrame:
    """`rank_<metric>_indistinct_from`: the teachers whose rank this teacher's cannot be told apart
    from (";"-separated, empty when every pair is distinguishable or nothing is defined)."""
    import polars as pl

    cols: dict[str, list[str]] = {}
    for m in ranked_ci_metrics():
        sub = pairs.filter((pl.col("metric") == m) & (pl.col("distinguishable") == False))  # noqa: E712
        peers: dict[str, list[str]] = {t: [] for t in teachers}
        for a, b in sub.select("teacher_a", "teacher_b").iter_rows():
            peers[a].append(b)
            peers[b].append(a)
        cols[f"rank_{m}_indistinct_from"] = [";".join(sorted(peers[t])) for t in teachers]
    return pl.DataFrame({"teacher": teachers, **cols})
