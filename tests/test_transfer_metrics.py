"""Transfer-utility maths (SPEC section 4). Every expected number is derived by hand in the comment next
to it."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from legival_core import registry
from legival_core.transfer import (
    CurveMean,
    MetricMean,
    RegressionResult,
    SotuResult,
    TraceTransfer,
    aggregate_by_dataset,
    aggregate_by_student,
    aggregate_by_teacher,
    bin_of,
    first_success_bin,
    fotu,
    mean_curve,
    mean_of_defined,
    preprint_depths,
    regression,
    rollout_depths,
    sotu,
    trace_curve,
    trace_curve_or_none,
    trace_transfer,
)

# --- depths ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "s", "expected"),
    [
        (1, 3, (0, 1)),  # range(0, 1, 3) = {0}, plus m = 1
        (2, 3, (0, 2)),  # {0} plus m
        (3, 3, (0, 3)),  # multiples of 3 below 3: {0}; plus m = 3
        (6, 3, (0, 3, 6)),  # {0, 3} plus m = 6
        (7, 3, (0, 3, 6, 7)),  # {0, 3, 6} plus m = 7
        (10, 4, (0, 4, 8, 10)),  # {0, 4, 8} plus m = 10
        (4, 1, (0, 1, 2, 3, 4)),  # every step
        (5, 10, (0, 5)),  # interval longer than the trace: only the ends
    ],
)
def test_rollout_depths(m: int, s: int, expected: tuple[int, ...]) -> None:
    assert rollout_depths(m, s) == expected


def test_rollout_depths_default_interval_is_three() -> None:
    # s = 3: {0, 3, 6} plus m = 7
    assert rollout_depths(7) == (0, 3, 6, 7)


@pytest.mark.parametrize(
    ("m", "s", "expected"),
    [
        (1, 3, (0,)),  # range(0, 1, 3) = [0]; n - 1 = 0 already there; the full trace never appears
        (3, 3, (0, 2)),  # [0] plus n - 1 = 2
        (4, 3, (0, 3)),  # [0, 3]; n - 1 = 3 already there
        (7, 3, (0, 3, 6)),  # [0, 3, 6]; n - 1 = 6 already there (no depth 7)
        (8, 3, (0, 3, 6, 7)),  # [0, 3, 6] plus n - 1 = 7
        (10, 10, (0, 9)),  # [0] plus n - 1 = 9
        (2, 1, (0, 1)),  # [0, 1]; n - 1 = 1 already there
    ],
)
def test_preprint_depths(m: int, s: int, expected: tuple[int, ...]) -> None:
    assert preprint_depths(m, s) == expected


@pytest.mark.parametrize("fn", [rollout_depths, preprint_depths])
def test_depths_reject_empty_trace_and_bad_interval(fn: object) -> None:
    assert callable(fn)
    with pytest.raises(ValueError):
        fn(0)
    with pytest.raises(ValueError):
        fn(5, 0)


# --- bins --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "m", "expected"),
    [
        (3, 7, 22),  # (150 + 6) // 7 = 156 // 7 = 22  (7 * 22 = 154)
        (6, 7, 43),  # (300 + 6) // 7 = 306 // 7 = 43  (7 * 43 = 301)
        (7, 7, 50),  # (350 + 6) // 7 = 50
        (1, 100, 1),  # (50 + 99) // 100 = 1
        (2, 100, 1),  # (100 + 99) // 100 = 1: 2/100 = 0.02 is the right edge of bin 1
        (3, 100, 2),  # (150 + 99) // 100 = 2
        (1, 1, 50),  # (50 + 0) // 1 = 50
        (2, 4, 25),  # 2/4 = 0.5 = 25/50 exactly: right-closed, bin 25
        (1, 3, 17),  # (50 + 2) // 3 = 17: 1/3 in (0.32, 0.34]
        (0, 7, 0),  # the anchor
        (0, 1, 0),
    ],
)
def test_bin_of(k: int, m: int, expected: int) -> None:
    assert bin_of(k, m) == expected


def test_bin_of_is_exact_ceiling() -> None:
    # Integer arithmetic must equal ceil(B*k/m) computed with exact fractions (no float drift at edges).
    for m in range(1, 130):
        for k in range(1, m + 1):
            assert bin_of(k, m) == math.ceil(Fraction(50 * k, m))


def test_bin_of_other_bin_count() -> None:
    assert bin_of(1, 3, n_bins=10) == 4  # (10 + 2) // 3 = 4


def test_bin_of_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        bin_of(8, 7)
    with pytest.raises(ValueError):
        bin_of(-1, 7)
    with pytest.raises(ValueError):
        bin_of(1, 0)


# --- trace curve and FOTU ----------------------------------------------------------------------------


def test_curve_anchor_only_bin_b_observed() -> None:
    # m = 1: depths 0 (anchor, b = 0) and 1 (b = 50). y_0 = 0, y_1 = 1 -> f(b) = b/50.
    curve = trace_curve({0: 0.0, 1: 1.0}, m=1)
    assert len(curve) == 50
    assert curve == pytest.approx([b / 50 for b in range(1, 51)])
    # FOTU = (1/50) * sum_{b=1..50} b/50 = (50*51/2) / 2500 = 25.5 / 50 = 0.51
    assert fotu(curve) == pytest.approx(0.51)


def test_curve_anchor_decreasing() -> None:
    # y_0 = 1, y_1 = 0: f(b) = 1 - b/50; FOTU = (50 - 25.5) / 50 = 0.49
    curve = trace_curve({0: 1.0, 1: 0.0}, m=1)
    assert curve[0] == pytest.approx(0.98)  # 1 - 1/50
    assert curve[-1] == 0.0
    assert fotu(curve) == pytest.approx(0.49)


def test_curve_several_observed_points() -> None:
    # m = 7, K = (0, 3, 6, 7) -> bins (0, 22, 43, 50); y = (0, 1, 0, 1).
    # b in 1..21: b/22; f(22) = 1; b in 23..42: 1 - (b-22)/21; f(43) = 0; b in 44..49: (b-43)/7; f(50) = 1.
    curve = trace_curve({0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}, m=7)
    assert curve[11 - 1] == pytest.approx(0.5)  # 11/22
    assert curve[22 - 1] == 1.0
    assert curve[32 - 1] == pytest.approx(11 / 21)  # 1 - 10/21
    assert curve[43 - 1] == 0.0
    assert curve[46 - 1] == pytest.approx(3 / 7)  # (46-43)/7
    assert curve[50 - 1] == 1.0
    # sum: 1..21 -> 231/22 = 10.5; b=22 -> 1; 23..42 -> 20 - 210/21 = 10; b=43 -> 0; 44..49 -> 21/7 = 3;
    # b=50 -> 1. Total 25.5 -> FOTU 0.51.
    assert fotu(curve) == pytest.approx(0.51)


def test_curve_flat_after_first_success() -> None:
    # m = 7, y = (0, 1, 1, 1) at bins (0, 22, 43, 50): 1..21 -> b/22 (sum 10.5), 22..50 -> 1 (29 bins).
    # FOTU = (10.5 + 29) / 50 = 0.79
    curve = trace_curve({0: 0.0, 3: 1.0, 6: 1.0, 7: 1.0}, m=7)
    assert fotu(curve) == pytest.approx(0.79)


def test_curve_several_depths_in_one_bin() -> None:
    # m = 100: k = 1 and k = 2 both fall in bin 1, so y_1(bin) = (1 + 0) / 2 = 0.5; k = 100 -> bin 50.
    # Bins 2..49 interpolate between (1, 0.5) and (50, 1): f(b) = 0.5 + 0.5 * (b - 1) / 49.
    curve = trace_curve({0: 0.0, 1: 1.0, 2: 0.0, 100: 1.0}, m=100)
    assert curve[0] == pytest.approx(0.5)
    assert curve[25 - 1] == pytest.approx(0.5 + 12 / 49)  # 0.5 + 0.5 * 24/49
    assert curve[-1] == 1.0
    # sum: b=1 -> 0.5; b=2..49 -> 48*0.5 + (0.5/49) * (48*49/2) = 24 + 12 = 36; b=50 -> 1. 37.5 / 50 = 0.75
    assert fotu(curve) == pytest.approx(0.75)


def test_curve_fractional_samples() -> None:
    # y_k are means over samples; m = 1, y_0 = 0.5, y_1 = 0.5 -> flat 0.5, FOTU 0.5
    assert fotu(trace_curve({0: 0.5, 1: 0.5}, m=1)) == pytest.approx(0.5)


def test_curve_needs_both_ends() -> None:
    with pytest.raises(ValueError, match="k = m"):
        trace_curve({0: 0.0, 3: 1.0}, m=7)  # depth 7 overflowed: bin 50 unobserved
    with pytest.raises(ValueError, match="anchor"):
        trace_curve({3: 1.0, 7: 1.0}, m=7)


def test_curve_or_none() -> None:
    assert trace_curve_or_none({0: 0.0, 3: 1.0}, m=7) is None  # depth m excluded as overflow
    assert trace_curve_or_none({}, m=7) is None  # every depth overflowed
    assert trace_curve_or_none({0: 0.0, 1: 1.0}, m=1) == trace_curve({0: 0.0, 1: 1.0}, m=1)
    with pytest.raises(ValueError):
        trace_curve_or_none({0: 0.0, 9: 1.0, 7: 1.0}, m=7)  # k = 9 > m is still an error


def test_curve_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        trace_curve({0: 0.0, 1: 1.5}, m=1)
    with pytest.raises(ValueError):
        trace_curve({0: float("nan"), 1: 1.0}, m=1)


def test_fotu_empty_curve() -> None:
    with pytest.raises(ValueError):
        fotu(())


# --- first success -----------------------------------------------------------------------------------


def test_first_success_bin() -> None:
    # k = 0 does not count; k* = 6 -> bin 43 (see test_bin_of)
    assert first_success_bin({0: 1.0, 3: 0.0, 6: 1.0, 7: 1.0}, m=7) == 43
    # k* = 3 -> bin 22
    assert first_success_bin({0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}, m=7) == 22
    # y_3 = 0.5 is not a success (y_k = 1 required); k* = 7 -> bin 50
    assert first_success_bin({0: 0.0, 3: 0.5, 7: 1.0}, m=7) == 50
    # dict order does not matter: k* is the minimum depth
    assert first_success_bin({7: 1.0, 6: 1.0, 0: 0.0}, m=7) == 43


def test_first_success_none() -> None:
    assert first_success_bin({0: 1.0, 3: 0.0, 6: 0.0, 7: 0.0}, m=7) is None
    assert first_success_bin({}, m=7) is None


# --- SOTU --------------------------------------------------------------------------------------------


def test_sotu_all_equal_is_zero() -> None:
    # h = (1,): H = -1 * ln 1 = 0
    result = sotu([5, 5, 5])
    assert result == SotuResult(value=0.0, n_traces=3)
    assert math.copysign(1.0, result.value or 0.0) == 1.0  # +0.0, not -0.0


def test_sotu_uniform_over_all_bins_is_one() -> None:
    # h(b) = 1/50 for every b: H = -50 * (1/50) ln(1/50) = ln 50; SOTU = ln 50 / ln 50 = 1
    result = sotu(list(range(1, 51)))
    assert result.value == pytest.approx(1.0)
    assert result.n_traces == 50


def test_sotu_two_bins_half_half() -> None:
    # h = (1/2, 1/2): H = -2 * (1/2) ln(1/2) = ln 2; SOTU = ln 2 / ln 50 ≈ 0.1772
    result = sotu([3, 3, 40, 40])
    assert result.value == pytest.approx(math.log(2) / math.log(50))
    assert result.n_traces == 4


def test_sotu_unequal_shares() -> None:
    # h = (1/2, 1/4, 1/4): H = (1/2) ln 2 + 2 * (1/4) ln 4 = 0.5 ln 2 + ln 2 = 1.5 ln 2
    assert sotu([1, 1, 2, 3]).value == pytest.approx(1.5 * math.log(2) / math.log(50))


def test_sotu_leaves_out_undefined_taus() -> None:
    # the two None are left out: h = (1/2, 1/2) over 2 traces
    result = sotu([None, 3, None, 40])
    assert result.value == pytest.approx(math.log(2) / math.log(50))
    assert result.n_traces == 2


def test_sotu_undefined() -> None:
    assert sotu([None, None]) == SotuResult(value=None, n_traces=0)
    assert sotu([]) == SotuResult(value=None, n_traces=0)


def test_sotu_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        sotu([0])  # tau is a bin in 1..B
    with pytest.raises(ValueError):
        sotu([51])
    with pytest.raises(ValueError):
        sotu([1], n_bins=1)  # ln 1 = 0


# --- regression rate ---------------------------------------------------------------------------------


def test_regression_rate_and_count() -> None:
    # K = (0, 3, 6, 7), y = (0, 1, 0, 1): drops 0->1 no, 1->0 yes, 0->1 no -> count 1 of 3 transitions
    assert regression({0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}) == RegressionResult(
        rate=1 / 3, count=1, n_transitions=3
    )
    # y = (1, 0, 0, 1): 1->0 yes, 0->0 no (not a strict drop), 0->1 no -> 1 of 3
    assert regression({0: 1.0, 3: 0.0, 6: 0.0, 7: 1.0}).count == 1
    # fractional y = (1, 0.5, 0.25): two drops of two transitions -> rate 1
    assert regression({0: 1.0, 1: 0.5, 2: 0.25}) == RegressionResult(rate=1.0, count=2, n_transitions=2)


def test_regression_sorts_depths() -> None:
    # insertion order (7, 0, 3, 6) is sorted to (0, 3, 6, 7) first: same as the first case above
    assert regression({7: 1.0, 0: 0.0, 3: 1.0, 6: 0.0}).count == 1


def test_regression_undefined() -> None:
    # |K| = 1 or 0: no transition, rate undefined
    assert regression({0: 1.0}) == RegressionResult(rate=None, count=0, n_transitions=0)
    assert regression({}) == RegressionResult(rate=None, count=0, n_transitions=0)


# --- one (trace, student) ----------------------------------------------------------------------------


def test_trace_transfer() -> None:
    t = trace_transfer("T", "math", "S", "h1", {0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}, m=7)
    assert t.curve == trace_curve({0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}, m=7)
    assert t.fotu == pytest.approx(0.51)  # test_curve_several_observed_points
    assert t.tau == 22  # k* = 3
    assert t.rr == pytest.approx(1 / 3)
    assert t.rr_count == 1


def test_trace_transfer_overflow_at_depth_m() -> None:
    # depth 7 overflowed: no curve, and tau / RR are left undefined too (a success could hide at k = 7)
    t = trace_transfer("T", "math", "S", "h1", {0: 0.0, 3: 1.0}, m=7)
    assert (t.curve, t.fotu, t.tau, t.rr, t.rr_count) == (None, None, None, None, None)


# --- aggregation -------------------------------------------------------------------------------------


def _row(
    teacher: str,
    dataset: str,
    student: str,
    trace_id: str,
    curve: tuple[float, ...] | None,
    fotu_: float | None,
    tau: int | None,
    rr: float | None,
    rr_count: int | None,
) -> TraceTransfer:
    return TraceTransfer(teacher, dataset, student, trace_id, curve, fotu_, tau, rr, rr_count)


def _none_row(teacher: str, dataset: str, student: str, trace_id: str) -> TraceTransfer:
    return _row(teacher, dataset, student, trace_id, None, None, None, None, None)


ROWS = [
    # T / d1 / s1: two traces with values, one excluded (overflow)
    _row("T", "d1", "s1", "r1", (0.0, 1.0), 0.5, 2, 0.0, 0),
    _row("T", "d1", "s1", "r2", (1.0, 1.0), 1.0, 1, 0.5, 1),
    _none_row("T", "d1", "s1", "r3"),
    # T / d1 / s2: one trace, no first success
    _row("T", "d1", "s2", "r1", (0.0, 0.0), 0.0, None, 1.0, 2),
    # T / d2 / s1
    _row("T", "d2", "s1", "r5", (1.0, 1.0), 1.0, 1, 0.0, 0),
    _row("T", "d2", "s1", "r6", (1.0, 1.0), 1.0, 1, 0.0, 0),
    # U: only an excluded trace
    _none_row("U", "d1", "s1", "r7"),
]


def test_mean_helpers() -> None:
    assert mean_of_defined([1.0, None, 2.0]) == MetricMean(value=1.5, n=2)
    assert mean_of_defined([None]) == MetricMean(value=None, n=0)
    assert mean_curve([(0.0, 1.0), None, (1.0, 0.0)]) == CurveMean(values=(0.5, 0.5), n=2)
    assert mean_curve([None]) == CurveMean(values=None, n=0)
    with pytest.raises(ValueError):
        mean_curve([(0.0,), (0.0, 1.0)])


def test_aggregate_by_student() -> None:
    # n_bins = 2 so that two equal tau shares give H / ln B = ln 2 / ln 2 = 1
    by_student = aggregate_by_student(ROWS, n_bins=2)
    assert [(a.teacher, a.dataset, a.student) for a in by_student] == [
        ("T", "d1", "s1"),
        ("T", "d1", "s2"),
        ("T", "d2", "s1"),
        ("U", "d1", "s1"),
    ]
    t_d1_s1, t_d1_s2, t_d2_s1, u_d1_s1 = by_student
    # fotu (0.5 + 1.0) / 2 = 0.75; rr (0 + 0.5) / 2 = 0.25; count (0 + 1) / 2 = 0.5; r3 skipped
    assert t_d1_s1.fotu == MetricMean(0.75, 2)
    assert t_d1_s1.rr == MetricMean(0.25, 2)
    assert t_d1_s1.rr_count == MetricMean(0.5, 2)
    # taus (2, 1, None): h = (1/2, 1/2), H = ln 2, / ln 2 = 1.0 over 2 traces
    assert t_d1_s1.sotu.value == pytest.approx(1.0)
    assert t_d1_s1.sotu.n == 2
    # curve ((0,1) + (1,1)) / 2 = (0.5, 1.0)
    assert t_d1_s1.curve == CurveMean((0.5, 1.0), 2)
    # one trace, tau None: SOTU undefined
    assert t_d1_s2.fotu == MetricMean(0.0, 1)
    assert t_d1_s2.sotu == MetricMean(None, 0)
    # taus (1, 1): H = 0
    assert t_d2_s1.sotu == MetricMean(0.0, 2)
    assert t_d2_s1.fotu == MetricMean(1.0, 2)
    # nothing defined
    assert u_d1_s1.fotu == MetricMean(None, 0)
    assert u_d1_s1.sotu == MetricMean(None, 0)
    assert u_d1_s1.curve == CurveMean(None, 0)


def test_aggregate_by_dataset_and_teacher() -> None:
    by_dataset = aggregate_by_dataset(aggregate_by_student(ROWS, n_bins=2))
    assert [(a.teacher, a.dataset) for a in by_dataset] == [("T", "d1"), ("T", "d2"), ("U", "d1")]
    t_d1, t_d2, u_d1 = by_dataset
    # mean over students s1, s2: fotu (0.75 + 0.0) / 2 = 0.375; rr (0.25 + 1.0) / 2 = 0.625;
    # count (0.5 + 2) / 2 = 1.25; sotu: s2 undefined is skipped -> 1.0 over 1 student;
    # curve ((0.5, 1.0) + (0.0, 0.0)) / 2 = (0.25, 0.5)
    assert t_d1.fotu == MetricMean(0.375, 2)
    assert t_d1.rr == MetricMean(0.625, 2)
    assert t_d1.rr_count == MetricMean(1.25, 2)
    assert t_d1.sotu.value == pytest.approx(1.0)
    assert t_d1.sotu.n == 1
    assert t_d1.curve == CurveMean((0.25, 0.5), 2)
    assert t_d2.fotu == MetricMean(1.0, 1)
    assert t_d2.sotu == MetricMean(0.0, 1)
    assert u_d1.fotu == MetricMean(None, 0)

    by_teacher = aggregate_by_teacher(by_dataset)
    assert [a.teacher for a in by_teacher] == ["T", "U"]
    t, u = by_teacher
    # unweighted over datasets: fotu (0.375 + 1.0) / 2 = 0.6875 (a trace-weighted mean would be
    # (0.5 + 1 + 0 + 1 + 1) / 5 = 0.7); rr (0.625 + 0) / 2 = 0.3125; count (1.25 + 0) / 2 = 0.625;
    # sotu (1.0 + 0.0) / 2 = 0.5; mu_T = ((0.25, 0.5) + (1, 1)) / 2 = (0.625, 0.75)
    assert t.fotu == MetricMean(0.6875, 2)
    assert t.rr == MetricMean(0.3125, 2)
    assert t.rr_count == MetricMean(0.625, 2)
    assert t.sotu.value == pytest.approx(0.5)
    assert t.sotu.n == 2
    assert t.curve == CurveMean((0.625, 0.75), 2)
    assert u.fotu == MetricMean(None, 0)
    assert u.curve == CurveMean(None, 0)


# --- registry ----------------------------------------------------------------------------------------


def test_registered_metrics() -> None:
    assert registry.get("metric", "fotu") is fotu
    assert registry.get("metric", "sotu") is sotu
    assert registry.get("metric", "rr") is regression
    assert registry.get("metric", "regression") is regression
    assert registry.get("metric", "tau") is first_success_bin
    assert registry.get("metric", "trace_curve") is trace_curve
