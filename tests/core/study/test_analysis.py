"""Issue 42 part 5, planted truth: simulated participants whose correctness follows a known curve per
teacher, through the real path (study create -> record_answer -> `legival study grade` -> the report),
give back the teachers' FOTU ordering, each FOTU inside its interval, the exclusions; and the agreement
statistics equal scipy's and sklearn's on the same data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from legival_core.agreement import agreement
from legival_core.reports.compute.build import compute_report
from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.compute.human import HUMAN, human_study_of, spearman
from legival_core.store import Store, study_grades
from legival_core.store import study as reads
from legival_core.transfer.utility import bins_of, trace_transfer
from tests._cli import legival
from tests.core.study.helpers import make_store

CURVES = {"alpha": lambda f: 0.15 + 0.7 * f, "beta": lambda f: 0.05 + 0.3 * f, "gamma": lambda f: 0.55 + 0.45 * f}
"""P(correct) of a participant at prefix fraction f, per teacher: FOTU order gamma > alpha > beta."""
M, KS = 12, (3, 6, 9, 12)


def _simulate(db: Path, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    with Store(db) as store:
        for p in reads.participants(store, "s"):
            if p.admin:
                continue
            while (item := reads.next_item(store, "s", p.code)) is not None:
                teacher = item.trace_id.split("|")[0]
                if item.kind == "attention":
                    answer = "7" if p.code == "P01" else "42"  # P01 fails its attention check
                else:
                    answer = "42" if rng.random() < CURVES[teacher](item.k / item.m) else "the total is 41."
                reads.record_answer(store, "s", p.code, item.item_id, answer, int(rng.integers(1, 6)), None, 10.0)
        rows = []  # a model student with rollouts at every grid depth of every trace of the study
        for tid in {i for i in reads.assignments(store, "s")["trace_id"].to_list()}:
            for k in (0, *KS):
                rows.append({"trace_id": tid, "student_key": "s1", "k": k, "sample": 0, "m": M,
                             "bin": int(bins_of(np.array([k]), np.array([M]), 50)[0]), "status": "ok",
                             "correct": bool(rng.random() < 0.3 + 0.6 * k / M), "forced": False})
        with store.transaction():
            store.insert_rows("rollouts", rows)


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = make_store(tmp_path_factory.mktemp("analysis") / "a.duckdb", n_problems=16, m=M, stating=range(16))
    r = legival("study", "create", "--db", str(db), "--name", "s", "--problems", "12", "--per-participant", "12",
                "--participants", "60", "--attention", "1", "--seed", "2")
    assert r.returncode == 0, r.stderr
    _simulate(db)
    g = legival("study", "grade", "--db", str(db), "--name", "s")
    assert g.returncode == 0, g.stderr
    s = g.summary()
    assert s["graded"] == s["missing"] == 60 * 13 and s["studies"] == ["s"]
    again = legival("study", "grade", "--db", str(db))
    assert again.returncode == 0 and again.summary()["graded"] == 0  # nothing new: nothing regraded
    return db


def test_planted_curves_come_back_with_their_order_and_inside_their_intervals(study_db: Path) -> None:
    with Store(study_db, read_only=True) as store:
        data = compute_report(store, ReportConfig(resamples=300, seed=0))
    table = human_study_of(data)
    fotu = {r["teacher"]: r for r in table.filter((pl.col("section") == "teacher") & (pl.col("metric") == "fotu"))
            .iter_rows(named=True)}
    truth = {t: trace_transfer({k: c(k / M) for k in KS}, M, 50, open_ends=True).fotu for t, c in CURVES.items()}
    assert sorted(fotu, key=lambda t: fotu[t]["value"]) == sorted(truth, key=lambda t: truth[t] or 0) == [
        "beta", "alpha", "gamma"]
    for t, r in fotu.items():
        assert r["ci_low"] <= truth[t] <= r["ci_high"], (t, truth[t], r)
        assert r["ci_low"] < r["value"] < r["ci_high"] and r["n_participants"] > 30 and r["status"] == "computed"
    # the same numbers as the report's `human` student (one more student, the same code)
    st = data.aggregates.by_student.filter(pl.col("student") == HUMAN)
    assert sorted(st["teacher"].to_list()) == ["alpha", "beta", "gamma"]
    for r in st.iter_rows(named=True):
        assert r["fotu"] == pytest.approx(fotu[r["teacher"]]["value"])
    people = {r["metric"]: r["value"] for r in table.filter(pl.col("section") == "participants").iter_rows(named=True)}
    assert people == {"participants": 60, "excluded": 1, "answers_used": 59 * 12}


def test_agreement_rows_equal_scipy_and_sklearn_on_the_same_data(study_db: Path) -> None:
    from scipy.stats import spearmanr
    from sklearn.metrics import cohen_kappa_score

    with Store(study_db, read_only=True) as store:
        data = compute_report(store, ReportConfig(resamples=50, seed=0))
        ans = study_grades.human_answers(store, pl.DataFrame({"dataset": ["gsm8k"], "grader": [
            store._run("SELECT DISTINCT grader_version FROM study_grades")[0][0]]}), 0)
        roll = store._query("SELECT trace_id, k, avg(correct::INT) AS y FROM rollouts GROUP BY ALL")
    table = human_study_of(data)
    used = ans.filter((pl.col("kind") == "item") & ~pl.col("excluded"))
    items = used.group_by("trace_id", "k").agg(pl.col("correct").cast(pl.Float64).mean().alias("h")).join(
        roll, on=["trace_id", "k"])
    kappa = table.filter(pl.col("section") == "kappa").row(0, named=True)
    assert kappa["student"] == "s1" and kappa["n"] == items.height
    assert kappa["value"] == pytest.approx(cohen_kappa_score(items["h"] >= 0.5, items["y"] >= 0.5))
    assert kappa["ci_low"] <= kappa["value"] <= kappa["ci_high"]
    # beside kappa (issue 48): raw agreement, Gwet's AC1 (pe = 2 pi (1 - pi), pi the mean share correct), the
    # shares correct and the saturation flag, on the same items
    got = {r["metric"]: r for r in table.filter(pl.col("section") == "kappa").iter_rows(named=True)}
    h, y = (items["h"] >= 0.5).to_numpy(), (items["y"] >= 0.5).to_numpy()
    raw, pi = float((h == y).mean()), float((h.mean() + y.mean()) / 2)
    pe = 2 * pi * (1 - pi)
    assert got["raw_agreement"]["value"] == pytest.approx(raw) and got["raw_agreement"]["n"] == items.height
    assert got["gwet_ac1"]["value"] == pytest.approx((raw - pe) / (1 - pe))
    assert got["prevalence_correct_human"]["value"] == pytest.approx(h.mean())
    assert got["prevalence_correct_student"]["value"] == pytest.approx(y.mean())
    shares = (h.mean(), 1 - h.mean(), y.mean(), 1 - y.mean())
    assert got["saturated"]["value"] == float(max(shares) >= 0.7)
    assert all(r["status"] == "computed" for r in got.values())
    rated = used.filter(pl.col("rating").is_not_null())
    item_rho = table.filter(pl.col("metric") == "spearman_rating_correct").row(0, named=True)
    assert item_rho["value"] == pytest.approx(spearmanr(rated["rating"], rated["correct"].cast(pl.Int8)).statistic)
    by_t = data.aggregates.by_student.group_by("teacher", "student").agg(pl.col("fotu").mean()).pivot(
        "student", index="teacher", values="fotu").sort("teacher")
    rho = table.filter(pl.col("section") == "spearman_fotu").row(0, named=True)
    assert rho["n"] == 3 and rho["ci_low"] <= rho["value"] <= rho["ci_high"]
    # the model student's teacher FOTU on the study's problems (a paired comparison: docs/study.md)
    six = data.students.filter(pl.col("student") == "s1")["six"][0]
    s1 = (data.transfer.pairs.filter((pl.col("six") == six) & pl.col("fotu").is_not_null())
          .join(data.traces.select("tix", "teacher", "dataset", "problem_id"), on="tix")
          .join(used.select("dataset", "problem_id").unique(), on=["dataset", "problem_id"])
          .group_by("teacher", "dataset").agg(pl.col("fotu").mean())
          .group_by("teacher").agg(pl.col("fotu").mean()).sort("teacher"))
    assert s1["teacher"].to_list() == by_t["teacher"].to_list()
    assert rho["value"] == pytest.approx(spearmanr(by_t[HUMAN], s1["fotu"]).statistic)


@pytest.mark.parametrize("seed", range(4))
def test_kappa_and_spearman_equal_sklearn_and_scipy(seed: int) -> None:
    from scipy.stats import spearmanr
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(seed)
    a, b = rng.random(40) < 0.6, rng.random(40) < 0.4
    assert agreement(a.tolist(), b.tolist()).kappa == pytest.approx(cohen_kappa_score(a, b))
    x, y = rng.integers(1, 6, 30).astype(float), rng.random(30)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert agreement([True] * 5, [True] * 5, (False, True)).kappa is None and spearman(x[:2], y[:2]) is None


def test_open_ended_depths_use_the_answered_depths_alone() -> None:
    """SPEC section 4 on the observed depths: interpolation between them, flat before the first and
    after the last (no anchor), RR over the observed depths; a model student's pair keeps needing k = 0."""
    got = trace_transfer({3: 0.0, 6: 1.0, 12: 1.0}, 12, 4, open_ends=True)  # bins 1, 2, 4
    assert got.curve == (0.0, 1.0, 1.0, 1.0) and got.fotu == 0.75 and got.tau == 2 and got.y0 is None
    assert got.rr == 0.0 and got.n_transitions == 2
    late = trace_transfer({6: 1.0, 9: 0.0}, 12, 4, open_ends=True)  # bins 2, 3: flat on both sides
    assert late.curve == (1.0, 1.0, 0.0, 0.0) and late.rr == 1.0
    assert trace_transfer({6: 1.0, 12: 1.0}, 12, 4).curve is None  # anchored (a model student): no k = 0, no curve


def test_a_statistic_within_rounding_of_zero_reads_zero() -> None:
    """A kappa of exactly 0 computed as -3.3e-16 is written 0 (12 digits), never -0.0 or 3.3e-16."""
    from legival_core.reports.compute.human import _frame, _row

    frame = _frame([_row("kappa", "cohen_kappa", "computed", None, "s", -3.3e-16, (-1e-13, 0.25 + 1e-15), 5)])
    assert frame.row(0, named=True)["value"] == 0.0 and str(frame["value"][0]) == "0.0"
    assert (frame["ci_low"][0], frame["ci_high"][0]) == (0.0, 0.25)
