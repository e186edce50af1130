"""The vectorised transfer tables against the reference functions of `legival_core.transfer.metrics`."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from legival_core.reports.build import compute_report
from legival_core.reports.synthetic import fill_synthetic
from legival_core.reports.transfer_tables import sotu_from_taus, transfer_table
from legival_core.store import Store
from legival_core.transfer.depths import rollout_depths
from legival_core.transfer.metrics import (
    aggregate_by_dataset,
    aggregate_by_student,
    aggregate_by_teacher,
    sotu,
    trace_transfer,
)


def _random_pairs(n: int, seed: int) -> tuple[pl.DataFrame, list[tuple[int, int, int, dict[int, float]]]]:
    rng = random.Random(seed)
    rows, cases = [], []
    for tix in range(n):
        m = rng.randint(1, 130)
        for six in range(2):
            ks = list(rollout_depths(m, rng.choice([1, 2, 3, 5])))
            y: dict[int, float] = {}
            for k in ks:
                r = rng.random()
                if r < 0.06:  # every sample overflowed: depth not observed
                    rows.append({"tix": tix, "six": six, "k": k, "m": m, "y": None, "n_rollouts": 1, "n_overflow": 1})
                    continue
                val = rng.choice([0.0, 1.0, 1.0, 0.5, 1 / 3])
                y[k] = val
                rows.append({"tix": tix, "six": six, "k": k, "m": m, "y": val, "n_rollouts": 1, "n_overflow": 0})
            cases.append((tix, six, m, y))
    return pl.DataFrame(rows, schema_overrides={"y": pl.Float64}), cases


@pytest.mark.parametrize("n_bins", [50, 7])
def test_transfer_table_equals_reference_functions(n_bins: int) -> None:
    depths, cases = _random_pairs(300, seed=n_bins)
    tt = transfer_table(depths.sample(fraction=1.0, shuffle=True, seed=1), n_bins)
    pairs = tt.pairs.with_row_index("row")
    by_key = {(r["tix"], r["six"]): r for r in pairs.iter_rows(named=True)}
    n_curves = 0
    for tix, six, m, y in cases:
        ref = trace_transfer("t", "d", str(six), str(tix), y, m, n_bins)
        got = by_key[(tix, six)]
        assert got["has_curve"] == (ref.curve is not None)
        if ref.curve is None:
            assert got["fotu"] is None and got["tau"] is None and got["rr"] is None
            assert np.isnan(tt.curves[got["row"]]).all()
            continue
        n_curves += 1
        assert tt.curves[got["row"]] == pytest.approx(ref.curve, abs=1e-12)
        assert got["fotu"] == pytest.approx(ref.fotu, abs=1e-12)
        assert got["tau"] == ref.tau
        assert got["rr"] == (pytest.approx(ref.rr) if ref.rr is not None else None)
        assert got["rr_count"] == ref.rr_count
        assert got["y0"] == y[0]
    assert n_curves > 400  # most pairs have a curve; the rest exercise the overflow rule


def test_single_depth_pair_and_all_missing() -> None:
    depths = pl.DataFrame({"tix": [0, 0, 1], "six": [0, 0, 0], "k": [0, 1, 0], "m": [1, 1, 4], "y": [0.0, 1.0, None]},
                          schema_overrides={"y": pl.Float64})
    tt = transfer_table(depths)
    a, b = tt.pairs.sort("tix").iter_rows(named=True)
    assert a["fotu"] == pytest.approx(trace_transfer("t", "d", "s", "x", {0: 0.0, 1: 1.0}, 1).fotu)
    assert a["tau"] == 50 and a["rr"] == 0.0 and a["rr_count"] == 0
    assert b["has_curve"] is False and b["y0"] is None and b["n_overflow"] == 0


def test_invalid_depth_raises() -> None:
    with pytest.raises(ValueError):
        transfer_table(pl.DataFrame({"tix": [0], "six": [0], "k": [5], "m": [3], "y": [1.0]}))


def test_sotu_from_taus_matches_reference() -> None:
    rng = random.Random(4)
    rows = [{"g": g, "tau": rng.choice([None, 1, 2, 2, 7, 50])} for g in ("a", "b", "c") for _ in range(40)]
    rows += [{"g": "none", "tau": None}] * 3
    got = {r["g"]: r for r in sotu_from_taus(pl.DataFrame(rows), ["g"]).iter_rows(named=True)}
    for g in ("a", "b", "c"):
        ref = sotu([r["tau"] for r in rows if r["g"] == g])
        assert got[g]["sotu"] == pytest.approx(ref.value) and got[g]["n_sotu"] == ref.n_traces
    assert got["none"]["sotu"] is None and got["none"]["n_sotu"] == 0
    one = sotu_from_taus(pl.DataFrame({"g": ["x"] * 3, "tau": [4, 4, 4]}), ["g"])
    assert one["sotu"].to_list() == [0.0]


def test_report_levels_equal_reference_aggregation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Store(tmp_path / "s.duckdb") as store:
        fill_synthetic(store, teachers=("a", "b", "c"), datasets=("gsm8k", "math", "gpqa"),
                       students=("s1", "s2"), traces_per_cell=25, seed=11)
        data = compute_report(store, n_resamples=0)
        rows = store.query(
            "SELECT r.trace_id, t.teacher, t.dataset, s.name AS student, r.k, r.m, r.status, r.correct "
            "FROM rollouts r JOIN traces t USING (trace_id) JOIN students s USING (student_key)")
    per: dict[tuple[str, str, str, str], dict[str, object]] = {}
    for r in rows.iter_rows(named=True):
        key = (r["teacher"], r["dataset"], r["student"], r["trace_id"])
        entry = per.setdefault(key, {"m": r["m"], "y": {}})
        if r["status"] == "ok":
            entry["y"][r["k"]] = 1.0 if r["correct"] else 0.0  # type: ignore[index]
    traces = [trace_transfer(t, d, s, tid, e["y"], e["m"]) for (t, d, s, tid), e in per.items()]  # type: ignore[arg-type]
    ref_s = aggregate_by_student(traces)
    ref_d = aggregate_by_dataset(ref_s)
    ref_t = aggregate_by_teacher(ref_d)
    agg = data.aggregates
    got_s = {(r["teacher"], r["dataset"], r["student"]): r for r in agg.by_student.iter_rows(named=True)}
    for ref in ref_s:
        g = got_s[(ref.teacher, ref.dataset, ref.student)]
        assert g["fotu"] == pytest.approx(ref.fotu.value)
        assert g["sotu"] == pytest.approx(ref.sotu.value) and g["n_sotu"] == ref.sotu.n
        assert g["regression_rate"] == pytest.approx(ref.rr.value)
        assert g["rr_count"] == pytest.approx(ref.rr_count.value)
    got_d = {(r["teacher"], r["dataset"]): r for r in agg.by_dataset.iter_rows(named=True)}
    for ref_dd in ref_d:
        g = got_d[(ref_dd.teacher, ref_dd.dataset)]
        assert g["fotu"] == pytest.approx(ref_dd.fotu.value) and g["sotu"] == pytest.approx(ref_dd.sotu.value)
        curve = agg.curves_by_dataset.filter((pl.col("teacher") == ref_dd.teacher) & (pl.col("dataset") == ref_dd.dataset))
        assert curve.sort("bin")["f"].to_list() == pytest.approx(ref_dd.curve.values)
    got_t = {r["teacher"]: r for r in data.teacher_metrics.iter_rows(named=True)}
    for ref_tt in ref_t:
        g = got_t[ref_tt.teacher]
        assert g["fotu"] == pytest.approx(ref_tt.fotu.value)
        assert g["sotu"] == pytest.approx(ref_tt.sotu.value)
        assert g["regression_rate"] == pytest.approx(ref_tt.rr.value)
        curve = agg.curves_by_teacher.filter(pl.col("teacher") == ref_tt.teacher).sort("bin")["f"].to_list()
        assert curve == pytest.approx(ref_tt.curve.values)
    # counts: rollouts, overflow and forced add up to the store's rows
    assert int(agg.by_dataset["n_rollouts"].sum()) == rows.height
    assert int(agg.by_dataset["n_overflow"].sum()) == rows.filter(pl.col("status") == "overflow").height
