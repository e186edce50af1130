"""Transfer utility (SPEC section 4): ONE implementation, checked against values derived by hand.

The per-trace functions (`trace_transfer`, `trace_curve`, `sotu`, `bin_of`) run the vectorised code
the report runs (`transfer_table`, `sotu_from_taus`, `bins_of`) on one pair, and the aggregation levels
are checked through a real store and `compute_report`. Every expected number is derived by hand in
the comment next to it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from legival_core.transfer.depths import preprint_depths, rollout_depths
from legival_core.transfer.utility import SotuResult, bin_of, sotu, trace_curve, trace_transfer

B = 50


def fotu(curve: tuple[float, ...]) -> float:
    return math.fsum(curve) / len(curve)


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
        fn(0, 3)
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
    assert bin_of(k, m, B) == expected


def test_bin_of_is_exact_ceiling() -> None:
    # Integer arithmetic must equal ceil(B*k/m) computed with exact fractions (no float drift at edges).
    for m in range(1, 130):
        for k in range(1, m + 1):
            assert bin_of(k, m, B) == math.ceil(Fraction(50 * k, m))


def test_bin_of_other_bin_count() -> None:
    assert bin_of(1, 3, 10) == 4  # (10 + 2) // 3 = 4


def test_bin_of_rejects_out_of_range() -> None:
    for k, m in ((8, 7), (-1, 7), (1, 0)):
        with pytest.raises(ValueError):
            bin_of(k, m, B)


# --- trace curve and FOTU ----------------------------------------------------------------------------


def test_curve_anchor_only_bin_b_observed() -> None:
    # m = 1: depths 0 (anchor, b = 0) and 1 (b = 50). y_0 = 0, y_1 = 1 -> f(b) = b/50.
    t = trace_transfer({0: 0.0, 1: 1.0}, 1, B)
    assert t.curve is not None and len(t.curve) == 50
    assert t.curve == pytest.approx([b / 50 for b in range(1, 51)])
    # FOTU = (1/50) * sum_{b=1..50} b/50 = (50*51/2) / 2500 = 25.5 / 50 = 0.51
    assert t.fotu == pytest.approx(0.51)


def test_curve_anchor_decreasing() -> None:
    # y_0 = 1, y_1 = 0: f(b) = 1 - b/50; FOTU = (50 - 25.5) / 50 = 0.49
    curve = trace_curve({0: 1.0, 1: 0.0}, 1, B)
    assert curve[0] == pytest.approx(0.98)  # 1 - 1/50
    assert curve[-1] == 0.0
    assert fotu(curve) == pytest.approx(0.49)


def test_curve_several_observed_points() -> None:
    # m = 7, K = (0, 3, 6, 7) -> bins (0, 22, 43, 50); y = (0, 1, 0, 1).
    # b in 1..21: b/22; f(22) = 1; b in 23..42: 1 - (b-22)/21; f(43) = 0; b in 44..49: (b-43)/7; f(50) = 1.
    t = trace_transfer({0: 0.0, 3: 1.0, 6: 0.0, 7: 1.0}, 7, B)
    curve = t.curve
    assert curve is not None
    assert curve[11 - 1] == pytest.approx(0.5)  # 11/22
    assert curve[22 - 1] == 1.0
    assert curve[32 - 1] == pytest.approx(11 / 21)  # 1 - 10/21
    assert curve[43 - 1] == 0.0
    assert curve[46 - 1] == pytest.approx(3 / 7)  # (46-43)/7
    assert curve[50 - 1] == 1.0
    # sum: 1..21 -> 231/22 = 10.5; b=22 -> 1; 23..42 -> 20 - 210/21 = 10; b=43 -> 0; 44..49 -> 21/7 = 3;
    # b=50 -> 1. Total 25.5 -> FOTU 0.51.
    assert t.fotu == pytest.approx(0.51)
    assert t.tau == 22  # k* = 3 -> bin 22
    # drops: 0->1 no, 1->0 yes, 0->1 no -> 1 of 3 transitions
    assert (t.rr, t.rr_count, t.n_transitions) == (pytest.approx(1 / 3), 1, 3)
    assert t.y0 == 0.0


def test_curve_flat_after_first_success() -> None:
    # m = 7, y = (0, 1, 1, 1) at bins (0, 22, 43, 50): 1..21 -> b/22 (sum 10.5), 22..50 -> 1 (29 bins).
    # FOTU = (10.5 + 29) / 50 = 0.79
    assert trace_transfer({0: 0.0, 3: 1.0, 6: 1.0, 7: 1.0}, 7, B).fotu == pytest.approx(0.79)


def test_curve_several_depths_in_one_bin() -> None:
    # m = 100: k = 1 and k = 2 both fall in bin 1, so y_1(bin) = (1 + 0) / 2 = 0.5; k = 100 -> bin 50.
    # Bins 2..49 interpolate between (1, 0.5) and (50, 1): f(b) = 0.5 + 0.5 * (b - 1) / 49.
    curve = trace_curve({0: 0.0, 1: 1.0, 2: 0.0, 100: 1.0}, 100, B)
    assert curve[0] == pytest.approx(0.5)
    assert curve[25 - 1] == pytest.approx(0.5 + 12 / 49)  # 0.5 + 0.5 * 24/49
    assert curve[-1] == 1.0
    # sum: b=1 -> 0.5; b=2..49 -> 48*0.5 + (0.5/49) * (48*49/2) = 24 + 12 = 36; b=50 -> 1. 37.5 / 50 = 0.75
    assert fotu(curve) == pytest.approx(0.75)


def test_curve_fractional_samples() -> None:
    # y_k are means over samples; m = 1, y_0 = 0.5, y_1 = 0.5 -> flat 0.5, FOTU 0.5
    assert trace_transfer({0: 0.5, 1: 0.5}, 1, B).fotu == pytest.approx(0.5)


def test_curve_needs_both_ends() -> None:
    with pytest.raises(ValueError, match="k = m"):
        trace_curve({0: 0.0, 3: 1.0}, 7, B)  # depth 7 overflowed: bin 50 unobserved
    with pytest.raises(ValueError, match="anchor"):
        trace_curve({3: 1.0, 7: 1.0}, 7, B)


def test_no_curve_means_no_metric_at_all() -> None:
    # depth 7 overflowed: no curve, and tau / RR undefined too (a first success could hide at k = 7)
    t = trace_transfer({0: 0.0, 3: 1.0}, 7, B)
    assert (t.curve, t.fotu, t.tau, t.rr, t.rr_count) == (None, None, None, None, None)
    assert t.y0 == 0.0  # the baseline at k = 0 was observed
    empty = trace_transfer({}, 7, B)  # every depth overflowed
    assert (empty.curve, empty.y0, empty.n_transitions) == (None, None, 0)


def test_curve_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        trace_transfer({0: 0.0, 1: 1.5}, 1, B)
    with pytest.raises(ValueError):
        trace_transfer({0: 0.0, 9: 1.0, 7: 1.0}, 7, B)  # k = 9 > m


# --- first success -----------------------------------------------------------------------------------


def test_first_success_bin() -> None:
    # k = 0 does not count; k* = 6 -> bin 43 (see test_bin_of)
    assert trace_transfer({0: 1.0, 3: 0.0, 6: 1.0, 7: 1.0}, 7, B).tau == 43
    # y_3 = 0.5 is not a success (y_k = 1 required); k* = 7 -> bin 50
    assert trace_transfer({0: 0.0, 3: 0.5, 7: 1.0}, 7, B).tau == 50
    # dict order does not matter: k* is the minimum depth
    assert trace_transfer({7: 1.0, 6: 1.0, 0: 0.0}, 7, B).tau == 43
    assert trace_transfer({0: 1.0, 3: 0.0, 6: 0.0, 7: 0.0}, 7, B).tau is None


# --- regression rate ---------------------------------------------------------------------------------


def test_regression_rate_and_count() -> None:
    # y = (1, 0, 0, 1): 1->0 yes, 0->0 no (not a strict drop), 0->1 no -> 1 of 3
    t = trace_transfer({0: 1.0, 3: 0.0, 6: 0.0, 7: 1.0}, 7, B)
    assert (t.rr_count, t.n_transitions) == (1, 3)
    # fractional y = (1, 0.5, 0.25): two drops of two transitions -> rate 1
    t = trace_transfer({0: 1.0, 1: 0.5, 2: 0.25}, 2, B)
    assert (t.rr, t.rr_count, t.n_transitions) == (1.0, 2, 2)
    # insertion order (7, 0, 3, 6) is sorted to (0, 3, 6, 7) first
    assert trace_transfer({7: 1.0, 0: 0.0, 3: 1.0, 6: 0.0}, 7, B).rr_count == 1


# --- SOTU --------------------------------------------------------------------------------------------


def test_sotu_all_equal_is_zero() -> None:
    # h = (1,): H = -1 * ln 1 = 0
    result = sotu([5, 5, 5], B)
    assert result == SotuResult(value=0.0, n_traces=3)
    assert math.copysign(1.0, result.value or 0.0) == 1.0  # +0.0, not -0.0


def test_sotu_uniform_over_all_bins_is_one() -> None:
    # h(b) = 1/50 for every b: H = -50 * (1/50) ln(1/50) = ln 50; SOTU = ln 50 / ln 50 = 1
    result = sotu(list(range(1, 51)), B)
    assert result.value == pytest.approx(1.0)
    assert result.n_traces == 50


def test_sotu_shares() -> None:
    # h = (1/2, 1/2): H = ln 2; SOTU = ln 2 / ln 50 ~ 0.1772
    assert sotu([3, 3, 40, 40], B).value == pytest.approx(math.log(2) / math.log(50))
    # h = (1/2, 1/4, 1/4): H = (1/2) ln 2 + 2 * (1/4) ln 4 = 1.5 ln 2
    assert sotu([1, 1, 2, 3], B).value == pytest.approx(1.5 * math.log(2) / math.log(50))
    # the two None are left out: h = (1/2, 1/2) over 2 traces
    assert sotu([None, 3, None, 40], B) == SotuResult(pytest.approx(math.log(2) / math.log(50)), 2)


def test_sotu_undefined_and_bad_input() -> None:
    assert sotu([None, None], B) == SotuResult(value=None, n_traces=0)
    assert sotu([], B) == SotuResult(value=None, n_traces=0)
    for bad in ([0], [51]):
        with pytest.raises(ValueError):
            sotu(bad, B)  # tau is a bin in 1..B
    with pytest.raises(ValueError):
        sotu([1], 1)  # ln 1 = 0


# --- aggregation, through a real store and the report ---------------------------------------------------
#
# B = 2 and every trace has m = 2 steps with depths 0, 1, 2 (bins 0, 1, 2: (2k + 1) // 2), so a pair's
# curve is (y_1, y_2), FOTU their mean, tau the bin of the first k >= 1 with y_k = 1, RR drops / 2.
# A missing depth overflowed (status 'overflow').
PAIRS = {
    # teacher, dataset, trace, student: y by depth
    ("T", "d1", "r1", "s1"): {0: 0, 1: 0, 2: 1},  # curve (0, 1): fotu .5, tau 2, rr 0/2, y0 0
    ("T", "d1", "r2", "s1"): {0: 1, 1: 1, 2: 0},  # curve (1, 0): fotu .5, tau 1, rr 1/2, y0 1
    ("T", "d1", "r3", "s1"): {0: 0},  # depths 1 and 2 overflowed: no curve; y0 0
    ("T", "d1", "r1", "s2"): {0: 1, 1: 0, 2: 0},  # curve (0, 0): fotu 0, no tau, rr 1/2, y0 1
    ("T", "d2", "r5", "s1"): {0: 0, 1: 1, 2: 1},  # curve (1, 1): fotu 1, tau 1, rr 0, y0 0
    ("T", "d2", "r6", "s1"): {0: 1, 1: 1, 2: 1},  # curve (1, 1): fotu 1, tau 1, rr 0, y0 1
    ("U", "d1", "r7", "s1"): {1: 1},  # k = 0 and 2 overflowed: nothing defined
}


def test_report_aggregation_levels_by_hand() -> None:
    """(teacher, dataset, student) -> mean over students -> unweighted mean over datasets, with the
    report's own aggregation code on in-memory inputs."""
    import polars as pl

    from legival_core.reports.compute.aggregate import aggregate, index_traces
    from legival_core.transfer.utility import transfer_table

    # The report's levels from in-memory inputs: traces (all correct, m = 2) and depths.
    keys = sorted({(t, d, r) for t, d, r, _ in PAIRS})
    students = pl.DataFrame({"six": [0, 1], "student_key": ["k1", "k2"], "student": ["s1", "s2"]})
    traces = _trace_frame(keys)
    rows = []
    tix = {f"{t}-{r}": i for i, (t, _d, r) in enumerate(keys)}
    for (t, _d, r, s), ys in PAIRS.items():
        for k in (0, 1, 2):
            rows.append({"tix": tix[f"{t}-{r}"], "six": 0 if s == "s1" else 1, "k": k, "m": 2,
                         "y": float(ys[k]) if k in ys else None, "n_rollouts": 1,
                         "n_overflow": 0 if k in ys else 1, "n_forced": 0, "n_rollout_unparsed": 0})
    tt = transfer_table(pl.DataFrame(rows), 2)
    agg = aggregate(index_traces(traces), tt, students)

    s = {(r["teacher"], r["dataset"], r["student"]): r for r in agg.by_student.iter_rows(named=True)}
    t_d1_s1 = s[("T", "d1", "s1")]
    # fotu (.5 + .5) / 2 = .5; rr (0 + .5) / 2 = .25; count (0 + 1) / 2 = .5 (r3 has no curve: skipped);
    # taus (2, 1): h = (1/2, 1/2), H = ln 2, / ln B = ln 2 -> 1.0 over 2 traces; baseline (0 + 1 + 0) / 3
    assert t_d1_s1["fotu"] == pytest.approx(0.5)
    assert t_d1_s1["regression_rate"] == pytest.approx(0.25)
    assert t_d1_s1["rr_count"] == pytest.approx(0.5)
    assert (t_d1_s1["sotu"], t_d1_s1["n_sotu"]) == (pytest.approx(1.0), 2)
    assert t_d1_s1["student_baseline_acc"] == pytest.approx(1 / 3)
    t_d1_s2 = s[("T", "d1", "s2")]  # one trace, no first success: SOTU undefined
    assert (t_d1_s2["fotu"], t_d1_s2["sotu"], t_d1_s2["n_sotu"]) == (0.0, None, 0)
    t_d2_s1 = s[("T", "d2", "s1")]  # taus (1, 1): H = 0
    assert (t_d2_s1["fotu"], t_d2_s1["sotu"]) == (1.0, 0.0)
    u = s[("U", "d1", "s1")]  # nothing defined
    assert (u["fotu"], u["sotu"], u["regression_rate"], u["student_baseline_acc"]) == (None, None, None, None)

    curves = {(r["teacher"], r["dataset"], r["student"], r["bin"]): r["f"] for r in agg.curves_by_student.iter_rows(named=True)}
    assert (curves[("T", "d1", "s1", 1)], curves[("T", "d1", "s1", 2)]) == (0.5, 0.5)  # ((0,1) + (1,0)) / 2

    d = {(r["teacher"], r["dataset"]): r for r in agg.by_dataset.iter_rows(named=True)}
    # mean over students s1, s2: fotu (.5 + 0) / 2 = .25; rr (.25 + .5) / 2 = .375; count (.5 + 1) / 2 = .75;
    # sotu: s2 undefined is skipped -> 1.0; baseline (1/3 + 1) / 2 = 2/3
    assert d[("T", "d1")]["fotu"] == pytest.approx(0.25)
    assert d[("T", "d1")]["regression_rate"] == pytest.approx(0.375)
    assert d[("T", "d1")]["rr_count"] == pytest.approx(0.75)
    assert d[("T", "d1")]["sotu"] == pytest.approx(1.0)
    assert d[("T", "d1")]["student_baseline_acc"] == pytest.approx(2 / 3)
    assert (d[("T", "d2")]["fotu"], d[("T", "d2")]["sotu"]) == (1.0, 0.0)

    t = {r["teacher"]: r for r in agg.by_teacher.iter_rows(named=True)}
    # unweighted over datasets: fotu (.25 + 1) / 2 = .625 (a trace-weighted mean would differ);
    # rr (.375 + 0) / 2 = .1875; sotu (1 + 0) / 2 = .5
    assert t["T"]["fotu"] == pytest.approx(0.625)
    assert t["T"]["regression_rate"] == pytest.approx(0.1875)
    assert t["T"]["sotu"] == pytest.approx(0.5)
    assert t["U"]["fotu"] is None
    mu = {(r["teacher"], r["bin"]): r["f"] for r in agg.curves_by_teacher.iter_rows(named=True)}
    # mu_T = (((.5,.5) + (0,0)) / 2 + (1,1)) / 2 = ((.25,.25) + (1,1)) / 2 = (.625, .625)
    assert (mu[("T", 1)], mu[("T", 2)]) == (pytest.approx(0.625), pytest.approx(0.625))
    # n: the trace curves (trace x student) behind a bin at every level, never the number of datasets
    sn = agg.curves_by_student.filter((pl.col("teacher") == "T") & (pl.col("bin") == 1))
    dn = {r["dataset"]: r["n"] for r in agg.curves_by_dataset.filter((pl.col("teacher") == "T") & (pl.col("bin") == 1))
          .iter_rows(named=True)}
    tn = {(r["teacher"], r["bin"]): r["n"] for r in agg.curves_by_teacher.iter_rows(named=True)}
    assert dn == {d: int(sn.filter(pl.col("dataset") == d)["n"].sum()) for d in ("d1", "d2")}
    assert tn[("T", 1)] == tn[("T", 2)] == int(sn["n"].sum()) == sum(dn.values())


def _trace_frame(keys: list[tuple[str, str, str]]):  # type: ignore[no-untyped-def]
    """A trace table with the registry's per-trace columns (all traces correct, complete, m = 2)."""
    import polars as pl

    from legival_core.metrics.base import stored_trace_metrics
    from legival_core.reports.compute.trace_table import with_derived_columns

    n = len(keys)
    cols: dict[str, object] = {
        "trace_id": [f"{t}-{r}" for t, _d, r in keys], "teacher": [t for t, _d, _r in keys],
        "dataset": [d for _t, d, _r in keys], "problem_id": [r for _t, _d, r in keys],
        "truncated": [False] * n, "correct": [True] * n, "grade_status": ["ok"] * n, "m": [2] * n,
    }
    frame = pl.DataFrame(cols)
    for m in stored_trace_metrics():
        frame = frame.with_columns(pl.lit(2.0 if m.name == "step_len" else None, pl.Float64).alias(m.name))
        if m.judged:
            frame = frame.with_columns(pl.lit("lexical").alias(f"{m.name}_method"))
    return with_derived_columns(frame)


def test_many_pairs_at_once_equal_each_pair_alone() -> None:
    """The store-wide table keeps pairs apart: each row equals the same pair computed alone
    (random traces, overflowed depths, several students, unsorted input)."""
    import random

    import polars as pl

    from legival_core.transfer.utility import transfer_table

    rng = random.Random(7)
    rows, alone = [], {}
    for tix in range(60):
        m = rng.randint(1, 12)
        for six in range(3):
            ys = {k: rng.choice([0.0, 0.5, 1.0]) for k in rollout_depths(m, 3) if rng.random() > 0.1}
            alone[(tix, six)] = trace_transfer(ys, m, B)
            rows += [{"tix": tix, "six": six, "k": k, "m": m, "y": ys.get(k)} for k in rollout_depths(m, 3)]
    rng.shuffle(rows)
    tt = transfer_table(pl.DataFrame(rows, schema_overrides={"y": pl.Float64}), B)
    for i, r in enumerate(tt.pairs.iter_rows(named=True)):
        ref = alone[(r["tix"], r["six"])]
        assert r["fotu"] == (pytest.approx(ref.fotu) if ref.fotu is not None else None)
        assert (r["tau"], r["rr_count"], r["y0"]) == (ref.tau, ref.rr_count, ref.y0)
        if ref.curve is not None:
            assert tuple(tt.curves[i]) == pytest.approx(ref.curve)
