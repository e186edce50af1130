"""Rank tables, correlations, Pareto frontier, rank stability, |delta TU|, elbow and bootstrap on small
tables whose answers are computed by hand or by scipy."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from legival_core.reports.compute.aggregate import index_traces
from legival_core.reports.compute.bootstrap import (
    bootstrap,
    ci_table,
    rank_pairs,
    ranked_ci_metrics,
    weighted_median,
)
from legival_core.reports.compute.build import ReportConfig, assemble, compute_report
from legival_core.reports.compute.elbow import redundancy_elbow
from legival_core.reports.compute.pareto import pareto_frontier
from legival_core.reports.compute.stats import (
    correlation_table,
    delta_tu,
    partial_spearman,
    rank_stability,
    rank_table,
    rank_values,
    spearman,
)
from legival_core.reports.compute.trace_table import with_derived_columns as with_derived
from legival_core.store import Store
from legival_core.transfer.utility import empty_depths, transfer_table
from tests._sql import rows
from tests.synthetic import fill_synthetic

RANKED_METRICS = ranked_ci_metrics()

NAN = float("nan")


# --- ranks --------------------------------------------------------------------------------------------


def test_rank_values_ties_and_nan() -> None:
    assert rank_values(np.array([0.5, 0.7, 0.7, NAN, 0.1]), "higher").tolist()[:3] == [3.0, 1.0, 1.0]
    r = rank_values(np.array([0.5, 0.7, 0.7, NAN, 0.1]), "lower")
    assert r[[0, 1, 2, 4]].tolist() == [2.0, 3.0, 3.0, 1.0] and math.isnan(r[3])
    assert rank_values(np.array([[1.0, 2.0], [2.0, 1.0]]), "higher").tolist() == [[2.0, 1.0], [1.0, 2.0]]


def test_rank_table_and_change_against_accuracy() -> None:
    t = pl.DataFrame({"teacher": ["a", "b", "c"], "accuracy": [0.9, 0.8, 0.7],
                      "token_len_median": [300.0, 100.0, None], "fotu": [0.2, 0.2, 0.5]})
    r = rank_table(t, {"accuracy": "higher", "token_len_median": "lower", "fotu": "higher"})
    assert r["rank_accuracy"].to_list() == [1, 2, 3]
    assert r["rank_token_len_median"].to_list() == [2, 1, None]
    assert r["rank_fotu"].to_list() == [2, 2, 1]
    assert r["rank_change_fotu"].to_list() == [-1, 0, 2]
    assert r["rank_change_token_len_median"].to_list() == [-1, 1, None]


# --- correlations -------------------------------------------------------------------------------------


def test_spearman_matches_scipy_with_ties_and_nan() -> None:
    x = [1.0, 2.0, 2.0, 4.0, None, 6.0, 7.0]
    y = [2.0, 1.0, 3.0, 3.0, 9.0, NAN, 8.0]
    got = spearman(x, y)
    ref = stats.spearmanr([1, 2, 2, 4, 7], [2, 1, 3, 3, 8])
    assert got.n == 5
    assert got.rho == pytest.approx(ref.statistic) and got.p_value == pytest.approx(ref.pvalue)


def test_spearman_undefined_cases() -> None:
    assert spearman([1.0, 2.0], [2.0, 1.0]).rho is None  # n < 3
    assert spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]).rho is None  # constant
    assert spearman([1.0], [1.0]).n == 1


def test_partial_spearman_equals_formula() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=12)
    x = z + rng.normal(size=12)
    y = -z + rng.normal(size=12)
    x[3] = x[4]  # a tie
    got = partial_spearman(list(x), list(y), list(z))
    rxy = stats.spearmanr(x, y).statistic
    rxz = stats.spearmanr(x, z).statistic
    ryz = stats.spearmanr(y, z).statistic
    expected = (rxy - rxz * ryz) / math.sqrt((1 - rxz**2) * (1 - ryz**2))
    assert got.rho == pytest.approx(expected)
    t = expected * math.sqrt((12 - 3) / (1 - expected**2))
    assert got.p_value == pytest.approx(2 * stats.t.sf(abs(t), 9))
    assert partial_spearman([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0]).rho is None  # n < 4


def test_correlation_table_kinds() -> None:
    t = pl.DataFrame({"teacher": list("abcde"), "accuracy": [0.1, 0.5, 0.3, 0.9, 0.7],
                      "token_len_median": [5.0, 3.0, 4.0, 1.0, 2.0], "fotu": [0.2, 0.4, None, 0.8, 0.5]})
    c = correlation_table(t, ["accuracy", "token_len_median", "fotu", "absent"])
    sp = c.filter(pl.col("kind") == "spearman")
    assert sp.height == 3
    row = sp.filter((pl.col("metric_a") == "accuracy") & (pl.col("metric_b") == "token_len_median")).row(0, named=True)
    assert row["rho"] == pytest.approx(-1.0) and row["n"] == 5
    row = sp.filter(pl.col("metric_b") == "fotu").filter(pl.col("metric_a") == "accuracy").row(0, named=True)
    assert row["n"] == 4 and row["rho"] == pytest.approx(stats.spearmanr([0.1, 0.5, 0.9, 0.7], [0.2, 0.4, 0.8, 0.5]).statistic)
    part = c.filter(pl.col("kind") == "partial_spearman")
    assert part["control"].unique().to_list() == ["token_len_median"]
    assert part.filter(pl.col("metric_a") == "fotu")["metric_b"].to_list() == ["accuracy"]


# --- Pareto -------------------------------------------------------------------------------------------


def test_pareto_frontier_by_hand() -> None:
    # lower x, higher y is better
    x = [100.0, 200.0, 150.0, 100.0, 300.0, None, 120.0]
    y = [0.5, 0.9, 0.4, 0.5, 0.9, 0.99, 0.7]
    assert pareto_frontier(x, y) == [True, True, False, True, False, None, True]
    assert pareto_frontier([1.0], [1.0]) == [True]  # a single teacher
    assert pareto_frontier([1.0, 2.0], [NAN, 1.0]) == [None, True]


# --- stability, delta TU --------------------------------------------------------------------------------


def test_rank_stability_and_delta_tu() -> None:
    td = pl.DataFrame({"teacher": list("abcdabcd"), "dataset": ["x"] * 4 + ["y"] * 4,
                       "fotu": [0.1, 0.2, 0.3, 0.4, 0.2, 0.1, 0.4, None]})
    s = rank_stability(td, "dataset", ["fotu", "absent"])
    assert s.height == 1
    assert s["rho"][0] == pytest.approx(stats.spearmanr([0.1, 0.2, 0.3], [0.2, 0.1, 0.4]).statistic)
    assert s["n"][0] == 3
    ts = pl.DataFrame({"teacher": ["a", "a", "b", "b"], "student": ["s1", "s2", "s1", "s2"],
                       "fotu": [0.5, 0.2, 0.3, None], "sotu": [0.1, 0.1, 0.2, 0.4],
                       "regression_rate": [0.0, 0.1, 0.2, 0.3]})
    d = delta_tu(ts)
    got = {(r["teacher"], r["metric"]): r["abs_delta"] for r in d.iter_rows(named=True)}
    assert got[("a", "fotu")] == pytest.approx(0.3) and got[("a", "sotu")] == 0.0
    assert got[("b", "fotu")] is None and got[("b", "sotu")] == pytest.approx(0.2)


# --- elbow --------------------------------------------------------------------------------------------


def test_redundancy_elbow_by_hand() -> None:
    traces = pl.DataFrame({"trace_id": ["t1", "t2", "t3", "t4"], "teacher": ["a", "a", "b", "b"],
                           "dataset": ["d"] * 4, "step_len": [3, 1, 3, 3], "truncated": [False, False, False, True]})
    # t1: r = [0.5, 0.9]; t3: r = [0.95, 0.95]; t4 truncated (left out)
    thresholds = (0.0, 0.6, 0.92, 1.0)
    sweep = pl.DataFrame({"trace_id": ["t1", "t3", "t4"], "thr_0": [1.0, 1.0, 0.0], "thr_1": [0.5, 1.0, 0.0],
                          "thr_2": [0.0, 1.0, 0.0], "thr_3": [0.0, 0.0, 0.0]})
    e = redundancy_elbow(traces, sweep, thresholds)
    a = e.filter(pl.col("teacher") == "a").sort("threshold")["redundancy"].to_list()
    b = e.filter(pl.col("teacher") == "b").sort("threshold")["redundancy"].to_list()
    assert a == [0.5, 0.25, 0.0, 0.0]  # t2 has m < 2: redundancy 0
    assert b == [1.0, 1.0, 1.0, 0.0]
    assert e.filter(pl.col("threshold") == 0.6).sort("teacher")["rank"].to_list() == [1, 2]
    assert e.filter(pl.col("threshold") == 1.0)["rank"].to_list() == [1, 1]


# --- bootstrap ----------------------------------------------------------------------------------------


def test_weighted_median_equals_expanded_median() -> None:
    rng = np.random.default_rng(2)
    values = rng.integers(0, 50, size=30).astype(float)
    problem = rng.integers(0, 10, size=30)
    w = rng.integers(0, 3, size=(20, 10))
    w[0] = 0
    got = weighted_median(values, problem, w.astype(float))
    for r in range(1, 20):
        expanded = np.repeat(values, w[r, problem])
        assert got[r] == (np.median(expanded) if len(expanded) else pytest.approx(NAN, nan_ok=True))
    assert np.isnan(got[0])


@pytest.fixture(scope="module")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("boot") / "s.duckdb"
    with Store(path) as store:
        fill_synthetic(store, teachers=("a", "b", "c", "d"), datasets=("gsm8k", "math"), traces_per_cell=30, seed=5)
        # a teacher with no correct traces: no transfer metrics at all
        rows(store, "UPDATE grades SET correct = false WHERE trace_id LIKE 'd|%'")
        rows(store, "DELETE FROM rollouts WHERE trace_id LIKE 'd|%'")
        yield compute_report(store, ReportConfig(resamples=0))


def test_bootstrap_with_unit_weights_reproduces_point_estimates(synthetic_data) -> None:  # type: ignore[no-untyped-def]
    data = synthetic_data
    from legival_core.reports.compute.aggregate import pair_frame

    pairs = pair_frame(data.traces, data.transfer, data.students)
    boot = bootstrap(data.traces, pairs, data.transfer.curves, 1, 0, 50, draw=lambda _d, p: np.ones((1, p)))
    tm = {r["teacher"]: r for r in data.teacher_metrics.iter_rows(named=True)}
    for m, samples in boot.samples.items():
        for i, t in enumerate(boot.teachers):
            point = tm[t][m]
            if point is None:
                assert np.isnan(samples[0, i]), (m, t)
            else:
                assert samples[0, i] == pytest.approx(point), (m, t)
    for i, t in enumerate(boot.teachers):
        curve = data.aggregates.curves_by_teacher.filter(pl.col("teacher") == t).sort("bin")["f"].to_numpy()
        if len(curve):
            assert boot.curves[0, i] == pytest.approx(curve)
        else:
            assert np.isnan(boot.curves[0, i]).all()


def test_bootstrap_intervals_seeded_and_sensible(synthetic_data) -> None:  # type: ignore[no-untyped-def]
    data = synthetic_data
    from legival_core.reports.compute.aggregate import pair_frame

    pairs = pair_frame(data.traces, data.transfer, data.students)
    b1 = bootstrap(data.traces, pairs, data.transfer.curves, n_resamples=300, seed=7, n_bins=50)
    b2 = bootstrap(data.traces, pairs, data.transfer.curves, n_resamples=300, seed=7, n_bins=50)
    for m in b1.samples:
        np.testing.assert_array_equal(b1.samples[m], b2.samples[m])
    ci = ci_table(b1)
    base = [c for c in data.teacher_metrics.columns if c == "teacher" or c in RANKED_METRICS or c.startswith("rank_")]
    tm = data.teacher_metrics.select([c for c in base if "_ci_" not in c and "indistinct" not in c]).join(ci, on="teacher")
    for row in tm.iter_rows(named=True):
        for m in ("accuracy", "token_len_median", "redundancy", "fotu", "sotu"):
            if row[m] is None:
                assert row[f"{m}_ci_low"] is None
                continue
            assert row[f"{m}_ci_low"] <= row[m] + 1e-9 <= row[f"{m}_ci_high"] + 2e-9 or m == "sotu"
        assert 1 <= row["rank_accuracy_ci_low"] <= row["rank_accuracy_ci_high"] <= 4
    d = tm.filter(pl.col("teacher") == "d").row(0, named=True)
    assert d["accuracy"] == 0.0 and d["fotu"] is None and d["rank_fotu"] is None and d["fotu_ci_low"] is None
    pairs_table = rank_pairs(b1)
    assert set(pairs_table["metric"].unique().to_list()) == set(RANKED_METRICS)
    acc = pairs_table.filter(pl.col("metric") == "accuracy")
    assert acc.height == 6
    assert (acc["p_a_better"] + acc["p_b_better"] <= 1.0 + 1e-12).all()


def test_single_teacher_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Store(tmp_path / "s.duckdb") as store:
        fill_synthetic(store, teachers=("solo",), datasets=("gsm8k",), traces_per_cell=15, seed=1)
        data = compute_report(store, ReportConfig(resamples=50))
    row = data.teacher_metrics.row(0, named=True)
    assert all(row[f"rank_{m}"] == 1 for m in RANKED_METRICS if row[m] is not None)
    assert row["on_pareto_frontier"] is True
    assert data.correlations["rho"].null_count() == data.correlations.height  # n = 1: nothing defined
    assert row["rank_accuracy_indistinct_from"] == ""


def test_no_rollouts_leaves_transfer_columns_empty() -> None:
    traces = index_traces(with_derived(pl.DataFrame({
        "trace_id": ["x", "y"], "teacher": ["a", "b"], "dataset": ["gsm8k"] * 2, "problem_id": ["p", "p"],
        "truncated": [False, False], "source_correct": [None, None], "correct": [True, False],
        "grade_status": ["ok", "ok"], "extracted": ["1", "2"], "groups_correct": [None, None],
        "token_len": [10, 20], "step_len": [2, 0], "m": [2, 0], "redundancy": [0.0, 0.0], "backtracking": [0.5, 0.0],
        "backtracking_method": ["lexical", "lexical"]},
        schema_overrides={"source_correct": pl.Boolean, "groups_correct": pl.Int32})))
    students = pl.DataFrame(schema={"six": pl.Int64, "student_key": pl.Utf8, "student": pl.Utf8})
    sweep = pl.DataFrame(schema={"trace_id": pl.Utf8, **{f"thr_{i}": pl.Float64 for i in range(21)}})
    data = assemble(traces, students, transfer_table(empty_depths(), 50), sweep, ReportConfig(resamples=20))
    td = data.aggregates.by_dataset
    for c in ("fotu", "sotu", "regression_rate", "student_baseline_acc"):
        assert td[c].null_count() == td.height
        assert data.teacher_metrics[c].null_count() == 2
    assert td.sort("teacher")["n_transfer_traces"].to_list() == [1, 0]
    assert td.sort("teacher")["n_correct_no_steps"].to_list() == [0, 0]
    assert data.teacher_metrics["on_pareto_frontier"].null_count() == 2
    assert data.tu_curves.height == 0

