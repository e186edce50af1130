"""The agreement statistics (`legival_core.agreement`, docs/agreement.md) against values computed by hand
from Gwet's and Fleiss' definitions.

Cross-check: every hand value below was also computed with the `irrCAC` package (0.4.4, Gwet's own
Python port; `CAC(...).conger()` is Cohen's kappa for two raters, `.gwet()` AC1/AC2, `.fleiss()` Fleiss'
kappa) and agrees to its 5 printed digits (noted beside each). irrCAC is not a test dependency: it pins
numpy < 2 and pandas < 3, which the project's environment cannot take.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from legival_core.agreement import (
    NO_ITEM,
    ONE_CATEGORY,
    PE_ONE,
    SATURATION,
    agreement,
    bootstrap_ci,
    multi_rater,
    multi_rater_ci,
    multi_rater_counts,
)


def paradox() -> tuple[list[int], list[int]]:
    """200 items on a binary flag: 193 both 0, 3 a=0/b=1, 3 a=1/b=0, 1 both 1."""
    a = [0] * 193 + [0] * 3 + [1] * 3 + [1]
    b = [0] * 193 + [1] * 3 + [0] * 3 + [1]
    return a, b


def test_prevalence_paradox_kappa_collapses_ac1_stays_near_raw_agreement() -> None:
    a, b = paradox()
    g = agreement(a, b, (0, 1))
    # raw = (193 + 1) / 200 = 0.97. Each rater: 4 of 200 are 1 -> prevalences (0.98, 0.02).
    # kappa: pe = 0.98^2 + 0.02^2 = 0.9608 -> (0.97 - 0.9608) / 0.0392 = 0.0092 / 0.0392 = 23/98 ~ 0.2347
    # AC1: pi_1 = 0.02, pe = (1/(2-1)) * 2 * 0.02 * 0.98 = 0.0392 -> (0.97 - 0.0392) / 0.9608 = 2327/2402 ~ 0.9688
    # (irrCAC: conger 0.23469, gwet 0.96878)
    assert g.n == 200 and g.raw == pytest.approx(0.97)
    assert g.kappa == pytest.approx(23 / 98) and g.gwet == pytest.approx(2327 / 2402)
    assert g.prevalence_a == pytest.approx((0.98, 0.02)) and g.prevalence_b == pytest.approx((0.98, 0.02))
    assert g.max_prevalence_a == pytest.approx(0.98) and g.saturated and g.gwet_name == "ac1"
    assert g.kappa_note is None and g.gwet_note is None


# a = 0,0,0,1,2,2 and b = 0,0,1,1,2,1 on the scale 0 < 1 < 2.
# margins a = (1/2, 1/6, 1/3), b = (1/3, 1/2, 1/6); pi = (5/12, 4/12, 3/12); sum pi(1 - pi) = 94/144 = 47/72.
A3 = [0, 0, 0, 1, 2, 2]
B3 = [0, 0, 1, 1, 2, 1]


def test_nominal_kappa_and_ac1_on_three_categories() -> None:
    g = agreement(A3, B3, (0, 1, 2))
    # raw = 4/6. kappa pe = 1/2*1/3 + 1/6*1/2 + 1/3*1/6 = 11/36 -> (24/36 - 11/36) / (25/36) = 13/25.
    # AC1 pe = 47/72 / (3 - 1) = 47/144 -> (96/144 - 47/144) / (97/144) = 49/97. (irrCAC: 0.52, 0.50515)
    assert g.raw == pytest.approx(2 / 3) and g.raw_weighted is None
    assert g.kappa == pytest.approx(13 / 25) and g.gwet == pytest.approx(49 / 97)
    assert not g.saturated and g.max_prevalence_a == pytest.approx(0.5)


def test_ordinal_quadratic_weighted_kappa_and_ac2() -> None:
    g = agreement(A3, B3, (0, 1, 2), ordinal=True)
    # weights 1 - (k - l)^2 / 4: 1 on the diagonal, 3/4 one apart, 0 two apart; T_w = 3 + 4 * 3/4 = 6.
    # pa = (1 + 1 + 3/4 + 1 + 1 + 3/4) / 6 = 11/12.
    # AC2: pe = T_w / (q (q - 1)) * 47/72 = 6/6 * 47/72 -> (66/72 - 47/72) / (25/72) = 19/25.
    # weighted kappa: pe = sum_kl w_kl a_k b_l = 1/2 * 17/24 + 1/6 * 7/8 + 1/3 * 13/24 = 49/72
    #   -> (66/72 - 49/72) / (23/72) = 17/23. (irrCAC quadratic: conger 0.73913, gwet 0.76)
    assert g.gwet_name == "ac2" and g.raw == pytest.approx(2 / 3) and g.raw_weighted == pytest.approx(11 / 12)
    assert g.kappa == pytest.approx(17 / 23) and g.gwet == pytest.approx(19 / 25)
    sk = pytest.importorskip("sklearn.metrics")
    assert g.kappa == pytest.approx(sk.cohen_kappa_score(A3, B3, weights="quadratic"))


def test_an_unused_category_changes_ac1_not_kappa() -> None:
    g = agreement(A3, B3, (0, 1, 2, 3))
    # q = 4: AC1 pe = 47/72 / 3 = 47/216 -> (144/216 - 47/216) / (169/216) = 97/169.
    assert g.kappa == pytest.approx(13 / 25) and g.gwet == pytest.approx(97 / 169)
    assert g.prevalence_a[3] == 0.0


def test_fleiss_and_multi_rater_ac1_with_missing_ratings() -> None:
    ratings = [[1, 1, 1], [0, 0, 1], [0, 0, None], [1, None, None]]
    m = multi_rater(ratings, (0, 1))
    # r_ik: (0,3), (2,1), (2,0), (0,1); n = 4 items, n2 = 3 rated twice or more.
    # pa = (1 + 2*1/(3*2) + 1) / 3 = 7/9; pi_0 = (0 + 2/3 + 1 + 0) / 4 = 5/12, pi_1 = 7/12.
    # Fleiss pe = 25/144 + 49/144 = 37/72 -> (56/72 - 37/72) / (35/72) = 19/35.
    # AC1 pe = 2 * 5/12 * 7/12 = 35/72 -> (56/72 - 35/72) / (37/72) = 21/37. (irrCAC: fleiss 0.54286, gwet 0.56757)
    assert (m.n, m.n_paired, m.raw) == (4, 3, pytest.approx(7 / 9))
    assert m.fleiss_kappa == pytest.approx(19 / 35) and m.gwet_ac1 == pytest.approx(21 / 37)
    assert m.prevalence == pytest.approx((5 / 12, 7 / 12)) and not m.saturated
    same = multi_rater_counts([[0, 3], [2, 1], [2, 0], [0, 1], [0, 0]], (0, 1))  # a row of no rating: left out
    assert (same.n, same.fleiss_kappa, same.gwet_ac1) == (4, m.fleiss_kappa, m.gwet_ac1)


def test_degenerate_cases_are_none_with_a_reason() -> None:
    empty = agreement([], [])
    assert (empty.n, empty.raw, empty.kappa, empty.gwet, empty.saturated) == (0, None, None, None, False)
    assert empty.kappa_note == empty.gwet_note == NO_ITEM
    one = agreement(["x", "x"], ["x", "x"])  # one category seen, none given: q = 1
    assert one.raw == 1.0 and one.kappa is None and one.gwet is None and one.gwet_note == ONE_CATEGORY
    fixed = agreement([1, 1], [1, 1], (0, 1))  # the scale given: AC1 is defined where kappa is not
    assert fixed.kappa is None and fixed.kappa_note == PE_ONE and fixed.gwet == 1.0 and fixed.saturated
    ordinal_one = agreement([2, 2], [2, 2], (0, 1, 2), ordinal=True)
    assert ordinal_one.kappa is None and ordinal_one.gwet == 1.0
    lone = multi_rater([[1], [0, None]])
    assert lone.n_paired == 0 and lone.fleiss_kappa is None and lone.gwet_ac1 is None and lone.fleiss_note
    assert multi_rater([]).fleiss_note == NO_ITEM
    same = multi_rater([[1, 1], [1, 1]], (0, 1))
    assert same.fleiss_kappa is None and same.gwet_ac1 == 1.0
    assert bootstrap_ci([], []).kappa == (None, None) and multi_rater_ci([[0, 1]], 0) == ((None, None), (None, None))
    with pytest.raises(ValueError, match="different numbers of items"):
        agreement([1], [1, 2])
    with pytest.raises(ValueError, match="label 3 is not one of the categories"):
        agreement([0, 3], [0, 1], (0, 1))


def test_bootstrap_is_seeded_and_holds_the_estimate() -> None:
    a, b = paradox()
    one, two = bootstrap_ci(a, b, (0, 1), resamples=300, seed=3), bootstrap_ci(a, b, (0, 1), resamples=300, seed=3)
    assert one == two and one.resamples == 300
    g = agreement(a, b, (0, 1))
    for (lo, hi), v in ((one.raw, g.raw), (one.kappa, g.kappa), (one.gwet, g.gwet)):
        assert lo is not None and hi is not None and v is not None and lo <= v <= hi
    assert one.kappa[1] - one.kappa[0] > 5 * (one.gwet[1] - one.gwet[0])  # kappa is the unstable one here
    fk, ac1 = multi_rater_ci([[0, 3], [2, 1], [2, 0], [0, 1]] * 10, 300, 3)
    m = multi_rater_counts([[0, 3], [2, 1], [2, 0], [0, 1]] * 10)
    assert fk[0] <= m.fleiss_kappa <= fk[1] and ac1[0] <= m.gwet_ac1 <= ac1[1]


labels = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40)


def _finite_or_none(v: float | None) -> bool:
    return v is None or math.isfinite(v)


@settings(max_examples=150, deadline=None)
@given(pairs=labels, ordinal=st.booleans())
def test_properties_range_symmetry_perfect_agreement(pairs: list[tuple[int, int]], ordinal: bool) -> None:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    cats = (0, 1, 2, 3)
    g, h = agreement(a, b, cats, ordinal), agreement(b, a, cats, ordinal)
    for v in (g.raw, g.kappa, g.gwet, g.raw_weighted):
        assert _finite_or_none(v)
    assert g.kappa is None or -1 - 1e-9 <= g.kappa <= 1 + 1e-9
    assert g.gwet is not None and g.gwet <= 1 + 1e-9  # q = 4 given: always defined
    if not ordinal:
        assert g.gwet >= -1 - 1e-9
    assert (h.raw, h.kappa, h.gwet) == pytest.approx((g.raw, g.kappa, g.gwet))
    assert (h.prevalence_a, h.prevalence_b) == (g.prevalence_b, g.prevalence_a) and h.saturated == g.saturated
    assert g.saturated == (max(*g.prevalence_a, *g.prevalence_b) >= SATURATION)
    same = agreement(a, a, cats, ordinal)
    assert same.raw == 1.0 and same.gwet == pytest.approx(1.0) and same.kappa in (None, pytest.approx(1.0))
    # two raters, nothing missing: the multi-rater AC1 is the two-rater AC1 (pi the mean of both margins)
    if not ordinal:
        assert multi_rater([list(p) for p in pairs], cats).gwet_ac1 == pytest.approx(g.gwet)
