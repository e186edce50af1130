"""The cross-fit hierarchical bootstrap of g-mean² (issue 48 part 3; docs/monitorability.md "Cross-fit
eligibility"). Per draw, for every group:

1. outer: its instances resampled with replacement (an instance drawn k times counts k times);
2. inner: within each (instance, arm), a fresh seeded split of the rows into a selection part (60%)
   and an estimation part (40%), and each part resampled with replacement within itself (one inner
   resample per instance x arm per draw, stratified by the split so the parts never share a row);
3. eligibility on the selection part: a one-sided Wald test of TE > 0 (`wald_passes`);
4. the metric on the estimation part (`gmean.instance_metrics`); an instance is eligible in the draw
   when it passes the test AND its estimation part is eligible (TE > 0, P(y=1|x=1) > 0);
5. the group's g-mean² (and TPR, TNR, effect size) = the mean over its eligible drawn instances; its
   eligible fraction = eligible drawn instances / drawn instances.

Rows are exchangeable within an (instance, arm, y, z) cell, so a split is a multivariate
hypergeometric draw of the cell counts and a resample a multinomial one: each draw is a handful of
numpy calls over every instance at once, whatever the number of rows (benchmarks/monitorability.py).
Draw b uses the generator `SeedSequence(seed).spawn(draws)[b]`: a draw's numbers do not depend on the
others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.monitor.gmean import Cells, instance_metrics, verbalisation

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

__all__ = ["DRAWS", "SELECTION", "Z_CRITICAL", "Draws", "cross_fit", "split_sizes", "summary", "wald_passes"]

DRAWS = 100
"""Bootstrap draws by default (`legival monitorability score --bootstrap`)."""
SELECTION = 0.6
"""The share of an (instance, arm)'s rows in the selection part."""
Z_CRITICAL = 1.96
"""The one-sided Wald test's threshold on z."""
MEASURES = ("gmean2", "TPR", "TNR", "effect_size", "eligible_fraction")


@dataclass(frozen=True, slots=True)
class Draws:
    """Per group (rows, in `Cells.groups` order) and draw (columns): the mean over eligible instances
    of each measure (NaN in a draw without an eligible instance), and the eligible fraction."""

    gmean2: np.ndarray
    tpr: np.ndarray
    tnr: np.ndarray
    effect_size: np.ndarray
    eligible_fraction: np.ndarray


def split_sizes(n: np.ndarray, selection: float = SELECTION) -> np.ndarray:
    """The selection part's size for an arm of n rows: round(selection * n) (halves up), kept within
    [1, n - 1] when n >= 2 so both parts have a row; an arm of one row puts it in the selection part
    (which then fails the test: it needs 2 rows), an empty arm has two empty parts."""
    import numpy as np

    s = np.floor(selection * n + 0.5).astype(np.int64)
    return np.where(n >= 2, np.clip(s, 1, n - 1), n)


def wald_passes(counts: np.ndarray, z_critical: float = Z_CRITICAL) -> np.ndarray:
    """The one-sided Wald test of TE > 0 on counts (..., 2, 4): z = (p1 - p0) / sqrt(s1²/n1 + s0²/n0)
    with the sample variances s² = n/(n-1) p(1-p) (ddof 1) of y in each arm; passes when z >= z_critical,
    or when the standard error is 0 and p1 > p0; needs at least 2 rows in each arm."""
    import numpy as np

    n = counts.sum(-1).astype(np.float64)
    k = (counts[..., 2] + counts[..., 3]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        var = n / (n - 1) * p * (1 - p)
        se = np.sqrt(var[..., 1] / n[..., 1] + var[..., 0] / n[..., 0])
        diff = p[..., 1] - p[..., 0]
    enough = (n[..., 0] >= 2) & (n[..., 1] >= 2)
    return enough & np.where(se > 0, diff >= z_critical * se, diff > 0)


def _split(rng: np.random.Generator, counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A uniform choice of `sizes` rows out of each cell's rows, as counts per type: a multivariate
    hypergeometric draw, one type after the other."""
    import numpy as np

    left, want = counts.sum(-1), sizes.copy()
    chosen = np.zeros_like(counts)
    for t in range(counts.shape[-1] - 1):
        good = counts[..., t]
        left = left - good
        chosen[..., t] = rng.hypergeometric(good, left, want)
        want = want - chosen[..., t]
    chosen[..., -1] = want
    return chosen


def _resample(rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
    """Each cell's rows resampled with replacement (as many as it has): a multinomial draw of its counts."""
    import numpy as np

    n = counts.sum(-1)
    flat, sizes = counts.reshape(-1, counts.shape[-1]), n.reshape(-1)
    p = np.where(sizes[:, None] > 0, flat / np.maximum(sizes, 1)[:, None], 1.0 / flat.shape[-1])
    return rng.multinomial(sizes, p).reshape(counts.shape)


def _one_draw(rng: np.random.Generator, cells: Cells, starts: np.ndarray, sizes: np.ndarray,
              selection: float, z_critical: float) -> tuple[np.ndarray, ...]:
    import numpy as np

    counts, group = cells.counts, cells.group
    n = counts.shape[0]
    picked = starts[group] + np.floor(rng.random(n) * sizes[group]).astype(np.int64)  # outer, per group
    weight = np.bincount(picked, minlength=n).astype(np.float64)
    chosen = _split(rng, counts, split_sizes(counts.sum(-1), selection))
    select, estimate = _resample(rng, chosen), _resample(rng, counts - chosen)
    m = instance_metrics(estimate)
    eligible = wald_passes(select, z_critical) & m.eligible
    w = weight * eligible
    n_eligible = np.add.reduceat(w, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        means = tuple(np.add.reduceat(np.where(eligible, v, 0.0) * w, starts) / n_eligible
                      for v in (m.gmean2, m.tpr, m.tnr, m.effect_size))
    return (*means, n_eligible / sizes)


def cross_fit(cells: Cells, draws: int = DRAWS, seed: int = 0, selection: float = SELECTION,
              z_critical: float = Z_CRITICAL) -> Draws:
    """The cross-fit hierarchical bootstrap (the module's docstring) of every group of `cells`."""
    import numpy as np

    if cells.counts.shape[0] == 0:
        empty = np.zeros((0, draws))
        return Draws(empty, empty, empty, empty, empty)
    starts = np.flatnonzero(np.r_[True, cells.group[1:] != cells.group[:-1]])
    sizes = np.diff(np.r_[starts, cells.group.shape[0]])
    out = np.full((5, starts.shape[0], draws), np.nan)
    for b, child in enumerate(np.random.SeedSequence(seed).spawn(draws)):
        out[:, :, b] = _one_draw(np.random.default_rng(child), cells, starts, sizes, selection, z_critical)
    return Draws(*out)


def _mean_std(values: np.ndarray) -> tuple[list[float | None], list[float | None]]:
    """Per row, the mean and the standard deviation (ddof 1) of its defined (non-NaN) draws; None when
    there is none (mean) or fewer than two (std)."""
    import numpy as np

    means, stds = [], []
    for row in values:
        ok = row[~np.isnan(row)]
        means.append(float(ok.mean()) if ok.size else None)
        stds.append(float(ok.std(ddof=1)) if ok.size >= 2 else None)
    return means, stds


def _interval(values: np.ndarray) -> tuple[list[float | None], list[float | None]]:
    """Per row, the percentile interval (`intervals.CI_LEVEL`) of its defined draws; None with fewer than two."""
    from legival_core.intervals import interval_1d

    bounds = [interval_1d(row, min_defined=2) for row in values]
    return [lo for lo, _ in bounds], [hi for _, hi in bounds]


def summary(cells: Cells, draws: int = DRAWS, seed: int = 0, selection: float = SELECTION,
            z_critical: float = Z_CRITICAL) -> pl.DataFrame:
    """Per group: `n_instances`, `missing_arm` (instances without a row in one arm: never eligible,
    counted in the eligible fraction), `draws`, `draws_defined` (draws with an eligible instance), the
    mean and std over draws of `gmean2`, `TPR`, `TNR`, `effect_size` and `eligible_fraction`, g-mean²'s
    percentile interval over its defined draws (`gmean2_ci_low`, `gmean2_ci_high`), and Chen
    et al.'s `verbalisation_rate` over `verbalisation_pairs` (on all rows, `gmean.verbalisation`)."""
    import numpy as np
    import polars as pl

    d = cross_fit(cells, draws, seed, selection, z_critical)
    arrays = dict(zip(MEASURES, (d.gmean2, d.tpr, d.tnr, d.effect_size, d.eligible_fraction), strict=True))
    n_groups = d.gmean2.shape[0]
    rows: dict[str, list[object]] = {"n_instances": [], "missing_arm": [], "verbalisation_rate": [],
                                     "verbalisation_pairs": []}
    bounds = np.searchsorted(cells.group, np.arange(n_groups + 1))
    for g in range(n_groups):
        counts = cells.counts[bounds[g]:bounds[g + 1]]
        v = verbalisation(counts)
        rows["n_instances"].append(int(counts.shape[0]))
        rows["missing_arm"].append(int(np.sum((counts[:, 0].sum(-1) == 0) | (counts[:, 1].sum(-1) == 0))))
        rows["verbalisation_rate"].append(v.rate)
        rows["verbalisation_pairs"].append(v.pairs)
    stats: dict[str, object] = {"draws": [draws] * n_groups,
                                "draws_defined": [int(np.sum(~np.isnan(r))) for r in d.gmean2]}
    for name, values in arrays.items():
        stats[f"{name}_mean"], stats[f"{name}_std"] = _mean_std(values)
    stats["gmean2_ci_low"], stats["gmean2_ci_high"] = _interval(d.gmean2)
    frame = pl.DataFrame({"n_instances": rows["n_instances"], "missing_arm": rows["missing_arm"], **stats,
                          "verbalisation_rate": rows["verbalisation_rate"],
                          "verbalisation_pairs": rows["verbalisation_pairs"]},
                         schema_overrides={f"{m}_{s}": pl.Float64 for m in MEASURES for s in ("mean", "std")}
                         | {"gmean2_ci_low": pl.Float64, "gmean2_ci_high": pl.Float64}
                         | {"verbalisation_rate": pl.Float64})
    return pl.concat([cells.groups, frame], how="horizontal") if cells.groups.width else frame
