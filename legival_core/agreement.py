"""Agreement of raters on the same items (issue 48 part 4, docs/agreement.md): the one place that computes
raw agreement, Cohen's kappa, Gwet's AC1 and AC2, Fleiss' kappa and Gwet's multi-rater AC1.

Why Gwet beside Cohen: kappa collapses when the labels are saturated (the prevalence paradox: 97% raw
agreement on a 95/5 split gives kappa ~0.2, because its chance agreement sum_k pa_k pb_k is itself ~0.9),
while AC1/AC2 stay near the raw agreement. Every result therefore carries the category prevalences of
each rater and a `saturated` flag (at least `SATURATION` of either rater's labels in one category).

Two raters a and b, n items, q categories; p_kl the share of items a put in k and b in l; a_k, b_l the
two raters' prevalences (the table's margins); pi_k = (a_k + b_k) / 2; w_kl the agreement weights:
identity (nominal), or quadratic (ordinal) w_kl = 1 - (k - l)^2 / (q - 1)^2 over the categories' ranks.
- raw agreement: sum_k p_kk (exact agreement, also for an ordinal scale); pa = sum_kl w_kl p_kl.
- Cohen's kappa (Cohen 1960; weighted, Cohen 1968): pe = sum_kl w_kl a_k b_l, kappa = (pa - pe) / (1 - pe).
  Identity weights give the plain kappa, quadratic ones the quadratic-weighted kappa.
- Gwet's AC1 (Gwet 2008, Br. J. Math. Stat. Psychol. 61:29-48, eq. 14) and AC2 (Gwet 2014, Handbook of
  Inter-Rater Reliability, 4th ed., ch. 3, eq. 3.5.4): pe = T_w / (q (q - 1)) sum_k pi_k (1 - pi_k), T_w
  = sum_kl w_kl (T_w = q for identity weights: pe = sum_k pi_k (1 - pi_k) / (q - 1)), AC = (pa - pe) / (1 - pe).
- Many raters with missing ratings (Gwet 2014 ch. 2, eqs. 2.8-2.11; Fleiss 1971, Psychol. Bull. 76:378):
  r_ik raters put item i in k, r_i = sum_k r_ik, items with r_i = 0 dropped (n left), n2 the items with
  r_i >= 2: pa = (1 / n2) sum_{r_i >= 2} sum_k r_ik (r_ik - 1) / (r_i (r_i - 1)), pi_k = (1 / n) sum_i
  r_ik / r_i; Fleiss' kappa pe = sum_k pi_k^2, Gwet's AC1 pe = sum_k pi_k (1 - pi_k) / (q - 1).

q counts the categories given (`categories`), else those seen in either rater's labels: AC1 depends on
q, so give the scale when it is known (a binary flag is (False, True) even where one label is never
used). A statistic that is undefined is None with its reason (`kappa_note`, `gwet_note`): no item; one
category only (q = 1); chance agreement 1 (kappa when both raters use one same category only). Never a
division by zero, never NaN as a number.

Intervals: percentile intervals over items resampled with replacement (`bootstrap_ci`). An item counts
only through its cell of the table (its pattern of counts for many raters), so a resample's table is
drawn as one multinomial over the cells with their observed shares: the same law as drawing items, at
the cost of the table's size rather than n (a million steps cost what a hundred do).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core.intervals import CI_LEVEL, interval_1d

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "SATURATION",
    "Agreement",
    "AgreementCI",
    "MultiRater",
    "agreement",
    "bootstrap_ci",
    "multi_rater",
    "multi_rater_ci",
    "multi_rater_counts",
    "weights",
]

SATURATION = 0.70
"""A rater's labels are saturated when at least this share of them falls in one category."""

NO_ITEM = "no item rated by both"
ONE_CATEGORY = "one category only: chance agreement is undefined"
PE_ONE = "chance agreement 1: both raters use one same category only"
FEW_RATERS = "no item rated twice or more"
FLEISS_PE_ONE = "chance agreement 1: every rating in one category"
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class Agreement:
    """Two raters on `n` items. `kappa` is quadratic-weighted and `gwet` is AC2 when `ordinal`, else
    plain kappa and AC1; `raw` is exact agreement, `raw_weighted` the weighted one (ordinal only).
    Prevalences are in the order of `categories`."""

    n: int
    categories: tuple[Any, ...]
    ordinal: bool
    raw: float | None
    raw_weighted: float | None
    kappa: float | None
    gwet: float | None
    prevalence_a: tuple[float, ...]
    prevalence_b: tuple[float, ...]
    max_prevalence_a: float | None
    max_prevalence_b: float | None
    saturated: bool
    kappa_note: str | None
    gwet_note: str | None

    @property
    def gwet_name(self) -> str:
        """`ac2` on an ordinal scale (quadratic weights), else `ac1`."""
        return "ac2" if self.ordinal else "ac1"


Interval = tuple[float | None, float | None]


@dataclass(frozen=True, slots=True)
class AgreementCI:
    """Percentile intervals (`level`) of raw agreement, kappa and AC1/AC2 over `resamples` item resamples;
    (None, None) where no resample defines the statistic (or none was drawn)."""

    raw: Interval
    kappa: Interval
    gwet: Interval
    resamples: int
    level: float


@dataclass(frozen=True, slots=True)
class MultiRater:
    """Many raters per item, some missing: `n` items with a rating, `n_paired` of them with two or more;
    `raw` is the pairwise agreement pa, `prevalence` the pi_k (module docstring)."""

    n: int
    n_paired: int
    categories: tuple[Any, ...]
    raw: float | None
    fleiss_kappa: float | None
    gwet_ac1: float | None
    prevalence: tuple[float, ...]
    max_prevalence: float | None
    saturated: bool
    fleiss_note: str | None
    gwet_note: str | None


def _categories(labels: Sequence[Hashable], given: Sequence[Any] | None) -> tuple[Any, ...]:
    if given is not None:
        cats = tuple(given)
        if len(set(cats)) != len(cats):
            raise ValueError(f"categories repeat a label: {list(cats)!r}")
        return cats
    seen = set(labels)
    try:
        return tuple(sorted(seen))
    except TypeError:  # labels of mixed types: a stable order all the same
        return tuple(sorted(seen, key=lambda v: (type(v).__name__, repr(v))))


def _codes(labels: Sequence[Hashable], index: dict[Any, int], who: str) -> list[int]:
    try:
        return [index[v] for v in labels]
    except KeyError as e:
        raise ValueError(f"rater {who}: label {e.args[0]!r} is not one of the categories {list(index)!r}") from None


def weights(q: int, ordinal: bool) -> np.ndarray:
    """The q x q agreement weights: identity, or quadratic 1 - (k - l)^2 / (q - 1)^2 when `ordinal`."""
    import numpy as np

    if not ordinal or q < 2:
        return np.eye(q)
    k = np.arange(q, dtype=float)
    return 1.0 - (k[:, None] - k[None, :]) ** 2 / (q - 1) ** 2


def _table_stats(counts: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """raw, raw_weighted, kappa, gwet (NaN where undefined) of R tables of counts (R x q x q)."""
    import numpy as np

    q = w.shape[0]
    n = counts.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        a, b = counts.sum(axis=2) / n[:, None], counts.sum(axis=1) / n[:, None]
        raw = np.trace(counts, axis1=1, axis2=2) / n  # sums of counts, one division: perfect agreement is 1.0
        pa = (counts * w).sum(axis=(1, 2)) / n
        pe_k = np.einsum("kl,rk,rl->r", w, a, b)
        kappa = np.where(pe_k < 1 - _EPS, (pa - pe_k) / (1 - pe_k), np.nan)
        if q < 2:
            gwet = np.full(len(n), np.nan)
        else:
            pi = (a + b) / 2
            pe_g = w.sum() / (q * (q - 1)) * (pi * (1 - pi)).sum(axis=1)
            gwet = np.where(pe_g < 1 - _EPS, (pa - pe_g) / (1 - pe_g), np.nan)
    return {"raw": raw, "raw_weighted": pa, "kappa": kappa, "gwet": gwet}


def _number(v: Any) -> float | None:
    x = float(v)
    return None if math.isnan(x) else x + 0.0


def _table(a: Sequence[Hashable], b: Sequence[Hashable], categories: Sequence[Any] | None
           ) -> tuple[tuple[Any, ...], np.ndarray]:
    import numpy as np

    if len(a) != len(b):
        raise ValueError(f"the two raters rate different numbers of items ({len(a)} and {len(b)})")
    cats = _categories([*a, *b], categories)
    index = {c: i for i, c in enumerate(cats)}
    q = len(cats)
    counts = np.zeros(q * q)
    if len(a):
        np.add.at(counts, np.asarray(_codes(a, index, "a")) * q + np.asarray(_codes(b, index, "b")), 1.0)
    return cats, counts.reshape(q, q)


def agreement(a: Sequence[Hashable], b: Sequence[Hashable], categories: Sequence[Any] | None = None,
              ordinal: bool = False) -> Agreement:
    """Raters a and b on the same items (`a[i]` and `b[i]` label item i). `categories`: the scale, in
    its order when `ordinal` (else the labels seen, sorted); a label outside it raises ValueError."""
    cats, counts = _table(a, b, categories)
    q, n = len(cats), len(a)
    if n == 0:
        return Agreement(0, cats, ordinal, None, None, None, None, (), (), None, None, False, NO_ITEM, NO_ITEM)
    s = {k: _number(v[0]) for k, v in _table_stats(counts[None], weights(q, ordinal)).items()}
    prev_a = tuple(float(x) + 0.0 for x in counts.sum(axis=1) / n)
    prev_b = tuple(float(x) + 0.0 for x in counts.sum(axis=0) / n)
    max_a, max_b = max(prev_a), max(prev_b)
    return Agreement(
        n, cats, ordinal, s["raw"], s["raw_weighted"] if ordinal else None, s["kappa"], s["gwet"], prev_a, prev_b,
        max_a, max_b, max(max_a, max_b) >= SATURATION,
        None if s["kappa"] is not None else (ONE_CATEGORY if q < 2 else PE_ONE),
        None if s["gwet"] is not None else ONE_CATEGORY)


def _interval(samples: np.ndarray, level: float) -> Interval:

    lo, hi = interval_1d(samples, level)
    return (None, None) if lo is None or hi is None else (_number(lo), _number(hi))


def bootstrap_ci(a: Sequence[Hashable], b: Sequence[Hashable], categories: Sequence[Any] | None = None,
                 ordinal: bool = False, resamples: int = 1000, seed: int = 0, level: float = CI_LEVEL
                 ) -> AgreementCI:
    """Percentile intervals of raw agreement, kappa and AC1/AC2 over items drawn with replacement
    (module docstring: one multinomial draw per resample over the table's cells), seeded."""
    import numpy as np

    cats, counts = _table(a, b, categories)
    n = len(a)
    if n == 0 or resamples <= 0:
        return AgreementCI((None, None), (None, None), (None, None), 0, level)
    q = len(cats)
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(n, counts.ravel() / n, size=resamples).reshape(resamples, q, q).astype(float)
    s = _table_stats(drawn, weights(q, ordinal))
    return AgreementCI(_interval(s["raw"], level), _interval(s["kappa"], level), _interval(s["gwet"], level),
                       resamples, level)


def multi_rater_counts(counts: Any, categories: Sequence[Any] | None = None) -> MultiRater:
    """Fleiss' kappa and Gwet's multi-rater AC1 from `counts` (items x categories: how many raters put
    each item in each category; items no rater rated are left out). `categories` names the columns."""
    import numpy as np

    c = _rated(counts)
    q = c.shape[1]
    cats = tuple(categories) if categories is not None else tuple(range(q))
    if len(cats) != q:
        raise ValueError(f"{len(cats)} categories named for {q} columns of counts")
    n, n2 = c.shape[0], int((c.sum(axis=1) >= 2).sum())
    if n == 0:
        return MultiRater(0, 0, cats, None, None, None, (), None, False, NO_ITEM, NO_ITEM)
    s = {k: v[0] for k, v in _weighted_multi(c, np.ones((1, n))).items()}
    prev = tuple(float(x) + 0.0 for x in s["pi"])
    raw, fleiss, gwet = (_number(s[k]) for k in ("raw", "fleiss", "gwet"))
    few = FEW_RATERS if n2 == 0 else None
    return MultiRater(n, n2, cats, raw, fleiss, gwet, prev, max(prev), max(prev) >= SATURATION,
                      None if fleiss is not None else few or (ONE_CATEGORY if q < 2 else FLEISS_PE_ONE),
                      None if gwet is not None else few or ONE_CATEGORY)


def _rated(counts: Any) -> np.ndarray:
    """`counts` as an items x categories float array, the items no rater rated left out."""
    import numpy as np

    c = np.asarray(counts, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"counts must be items x categories, got an array of shape {c.shape}")
    if (c < 0).any():
        raise ValueError("a count of raters is negative")
    return c[c.sum(axis=1) >= 1]


def _count_matrix(ratings: Sequence[Sequence[Any]], categories: Sequence[Any] | None
                  ) -> tuple[tuple[Any, ...], np.ndarray]:
    import numpy as np

    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    rows = [[v for v in item if not missing(v)] for item in ratings]
    cats = _categories([v for r in rows for v in r], categories)
    index = {c: i for i, c in enumerate(cats)}
    out = np.zeros((len(rows), len(cats)))
    for i, r in enumerate(rows):
        for k, m in Counter(_codes(r, index, f"of item {i}")).items():
            out[i, k] = m
    return cats, out


def multi_rater(ratings: Sequence[Sequence[Any]], categories: Sequence[Any] | None = None) -> MultiRater:
    """Fleiss' kappa and Gwet's multi-rater AC1 of `ratings` (items x raters, None or NaN where a rater
    did not rate the item)."""
    cats, counts = _count_matrix(ratings, categories)
    return multi_rater_counts(counts, cats)


def multi_rater_ci(counts: Any, resamples: int = 1000, seed: int = 0, level: float = CI_LEVEL
                   ) -> tuple[Interval, Interval]:
    """Percentile intervals of (Fleiss' kappa, Gwet's AC1) over items drawn with replacement: each
    resample draws as many items as there are from the distinct count patterns with their shares."""
    import numpy as np

    c = _rated(counts)
    if c.shape[0] == 0 or resamples <= 0:
        return (None, None), (None, None)
    patterns, freq = np.unique(c, axis=0, return_counts=True)
    n = c.shape[0]
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(n, freq / n, size=resamples).astype(float)  # R x patterns: items per pattern
    s = _weighted_multi(patterns, drawn)
    return _interval(s["fleiss"], level), _interval(s["gwet"], level)


def _weighted_multi(patterns: np.ndarray, times: np.ndarray) -> dict[str, np.ndarray]:
    """pa, pi, Fleiss' kappa and AC1 (NaN where undefined) of R item sets, set r holding the item of
    counts `patterns[j]` `times[r, j]` times (a resample never builds an R x n array)."""
    import numpy as np

    q = patterns.shape[1]
    r = patterns.sum(axis=1)
    paired = r >= 2
    agree = np.where(paired, (patterns * (patterns - 1)).sum(axis=1) / np.where(paired, r * (r - 1), 1), 0.0)
    share = patterns / r[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        pa = times @ agree / (times @ paired.astype(float))
        pi = times @ share / times.sum(axis=1)[:, None]
        pe_f = (pi * pi).sum(axis=1)
        fleiss = np.where(pe_f < 1 - _EPS, (pa - pe_f) / (1 - pe_f), np.nan)
        pe_g = (pi * (1 - pi)).sum(axis=1) / (q - 1) if q >= 2 else np.ones(len(pa))
        gwet = np.where(pe_g < 1 - _EPS, (pa - pe_g) / (1 - pe_g), np.nan)
    return {"raw": pa, "pi": pi, "fleiss": fleiss, "gwet": gwet}
