"""`legival study grade` then `legival report`, as a user runs them: the `human` student in the
per-student files, `human_study.csv` with one schema with and without a study, the coverage rows,
and no traceback on a store without studies."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from legival_core.store import Store
from legival_core.store import study as reads
from tests._cli import legival
from tests.core.study.helpers import make_store

COLUMNS = ["section", "teacher", "student", "metric", "value", "ci_low", "ci_high", "n", "n_answers",
           "n_participants", "status"]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_store(tmp_path / "s.duckdb", n_problems=8, m=12, stating=range(8))


def _answer_all(db: Path) -> None:
    with Store(db) as store:
        for p in reads.participants(store, "s"):
            while not p.admin and (item := reads.next_item(store, "s", p.code)) is not None:
                answer = "42" if item.kind == "attention" or item.k >= 6 else "$41$"
                reads.record_answer(store, "s", p.code, item.item_id, answer, 3, None, 5.0)


def test_a_store_without_studies_reports_no_human_and_says_how_to_start(db: Path, tmp_path: Path) -> None:
    r = legival("report", "--db", str(db), "--out", str(tmp_path / "out"), "--resamples", "0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert _header(tmp_path / "out" / "human_study.csv") == COLUMNS
    rows = _csv(tmp_path / "out" / "human_study.csv")
    assert [(x["section"], x["status"]) for x in rows] == [("participants", "not run: legival study create --db DB")]
    assert all(x["student"] != "human" for x in _csv(tmp_path / "out" / "teacher_dataset_student_metrics.csv"))
    assert all(x["metric"] != "human_study" for x in _csv(tmp_path / "out" / "coverage.csv"))
    g = legival("study", "grade", "--db", str(db))
    assert g.returncode == 0 and g.summary()["graded"] == 0 and "Traceback" not in g.stderr
    legival("study", "grade", "--db", str(db), "--name", "nope").error("no study 'nope'", "--name")


def test_grade_then_report_carries_the_human_student(db: Path, tmp_path: Path) -> None:
    r = legival("study", "create", "--db", str(db), "--name", "s", "--problems", "6", "--per-participant", "6",
                "--participants", "8", "--attention", "1", "--depths", "0.25,0.5,1")
    assert r.returncode == 0, r.stderr
    _answer_all(db)
    out = tmp_path / "out"
    before = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    assert before.returncode == 0, before.stderr
    assert [x["status"] for x in _csv(out / "human_study.csv")] == ["not run: legival study grade --db DB"]
    leaderboard = {f: _csv(out / f) for f in ("teacher_dataset_metrics.csv", "teacher_metrics.csv")}
    cov = [x for x in _csv(out / "coverage.csv") if x["metric"] == "human_study"]
    assert cov and {x["status"] for x in cov} == {"not run"} and {x["detail"] for x in cov} == {
        "legival study grade --db DB"}
    g = legival("study", "grade", "--db", str(db), "--name", "s")
    assert g.returncode == 0, g.stderr
    s = g.summary()
    assert s["graded"] == 8 * 7 and s["read_as_answer"] == 8 * 7  # `42`, `$41$`: single expressions
    rep = legival("report", "--db", str(db), "--out", str(out), "--resamples", "50")
    assert rep.returncode == 0, rep.stderr
    per_student = [x for x in _csv(out / "teacher_dataset_student_metrics.csv") if x["student"] == "human"]
    for f, rows_before in leaderboard.items():  # people stand beside the models: the teachers' means stay theirs
        after = _csv(out / f)
        for col in ("fotu", "sotu", "regression_rate", "n_students"):
            assert [x[col] for x in after] == [x[col] for x in rows_before], (f, col)
    assert {x["teacher"] for x in per_student} == {"alpha", "beta", "gamma"}
    # answers right from k >= 6 on (fractions 0.5 and 1 of 12 steps), wrong at k = 3: the same curve everywhere
    assert all(float(x["fotu"]) > 0.5 and int(x["n_rollouts"]) > 0 for x in per_student)
    assert _header(out / "human_study.csv") == COLUMNS
    rows = _csv(out / "human_study.csv")
    teacher = [x for x in rows if x["section"] == "teacher" and x["metric"] == "fotu"]
    assert {x["teacher"] for x in teacher} == {"alpha", "beta", "gamma"} and all(
        x["student"] == "human" and x["status"] == "computed" and x["ci_low"] for x in teacher)
    people = {x["metric"]: x["value"] for x in rows if x["section"] == "participants"}
    assert people == {"participants": "8.0", "excluded": "0.0", "answers_used": "48.0"}
    cov = [x for x in _csv(out / "coverage.csv") if x["metric"] == "human_study"]
    assert {x["status"] for x in cov} == {"computed"}
    page = (out / "index.html").read_text(encoding="utf-8")
    section = page.split('<section id="pf-human"', 1)[1].split("</section>", 1)[0]
    assert "Human FOTU per teacher" in section and "alpha" in section


def test_an_excluded_participant_is_left_out_of_coverage_and_human_out_of_delta_tu(db: Path, tmp_path: Path) -> None:
    """coverage.csv's human_study n counts the answers human_study.csv uses (an excluded participant's
    are not); delta_tu.csv compares model students only (the human FOTU is over the study's problems)."""
    r = legival("study", "create", "--db", str(db), "--name", "s", "--problems", "6", "--per-participant", "6",
                "--participants", "8", "--attention", "1", "--depths", "0.25,0.5,1")
    assert r.returncode == 0, r.stderr
    with Store(db) as store:
        for p in reads.participants(store, "s"):
            while not p.admin and (item := reads.next_item(store, "s", p.code)) is not None:
                wrong = item.kind == "attention" and p.code == "P01"  # P01 misses the check: excluded
                answer = "0" if wrong else "42" if item.kind == "attention" or item.k >= 6 else "$41$"
                reads.record_answer(store, "s", p.code, item.item_id, answer, 3, None, 5.0)
    assert legival("study", "grade", "--db", str(db)).returncode == 0
    out = tmp_path / "out"
    rep = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    assert rep.returncode == 0, rep.stderr
    people = {x["metric"]: x["value"] for x in _csv(out / "human_study.csv") if x["section"] == "participants"}
    assert people == {"participants": "8.0", "excluded": "1.0", "answers_used": "42.0"}
    cov = [x for x in _csv(out / "coverage.csv") if x["metric"] == "human_study"]
    assert sum(int(x["n"]) for x in cov) == 42 and any("excluded participants left out" in x["detail"] for x in cov)
    delta = _csv(out / "delta_tu.csv")
    assert all("human" not in (x["student_a"], x["student_b"]) for x in delta)  # one model student: no pair
    assert any(x["student"] == "human" for x in _csv(out / "teacher_dataset_student_metrics.csv"))
    assert all("human" not in (x["group_a"], x["group_b"]) for x in _csv(out / "rank_stability.csv"))


def test_grade_name_grades_that_study_only(db: Path) -> None:
    for name in ("s", "t"):
        r = legival("study", "create", "--db", str(db), "--name", name, "--problems", "6", "--per-participant", "6",
                    "--participants", "2", "--attention", "1", "--depths", "0.5,1")
        assert r.returncode == 0, r.stderr
    with Store(db) as store:
        for name in ("s", "t"):
            for p in reads.participants(store, name):
                while not p.admin and (item := reads.next_item(store, name, p.code)) is not None:
                    reads.record_answer(store, name, p.code, item.item_id, "42", None, None, 1.0)
        per_study = {n: reads.answers(store, n).height for n in ("s", "t")}
    first = legival("study", "grade", "--db", str(db), "--name", "t")
    assert first.returncode == 0 and first.summary()["graded"] == per_study["t"] and first.summary()["studies"] == ["t"]
    rest = legival("study", "grade", "--db", str(db))
    assert rest.returncode == 0 and rest.summary()["graded"] == per_study["s"] and rest.summary()["studies"] == ["s"]
