"""The report's step files (issue 41, item 3), through `legival report` as a user runs it: on the demo
store `step_events.parquet`, `step_effects.csv`, `step_logistic.csv` and `student_agreement.csv` exist
with one schema whether `legival step-events` ran or not (not run: every row says so, in coverage.csv too,
and the paper section names the command); without the efficiency stage the backtracking and
redundancy rows say `not run: legival efficiency --db DB`, never absent; `step_effects.png` draws every
feature and every row's status."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pytest

from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.compute.step_effects import FEATURES, LOGIT_TERMS, OUTCOMES
from legival_core.reports.render.plots import step_effects_figure
from legival_core.reports.stage import build_reports
from legival_core.store import Store
from tests._cli import legival
from tests.cli.test_step_events_command import build_store
from tests.core.reports.test_demo_snapshot import load_demo_store

CSVS = ("step_effects.csv", "step_logistic.csv", "student_agreement.csv")
NOT_RUN = "not run: legival step-events --db DB"


def _report(db: Path, out: Path) -> None:
    r = legival("report", "--db", str(db), "--out", str(out), "--resamples", "20")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert all(f'"{name}"' in r.stdout.splitlines()[-1] for name in (*CSVS, "step_events.parquet", "step_effects.png"))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return next(csv.reader(fh))


@pytest.fixture(scope="module")
def demo_reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo store's report before and after `legival step-events`."""
    tmp = tmp_path_factory.mktemp("steps-report")
    db = tmp / "demo.duckdb"
    load_demo_store(db)
    _report(db, tmp / "before")
    ran = legival("step-events", "--db", str(db))
    assert ran.returncode == 0, ran.stderr[-3000:]
    _report(db, tmp / "after")
    return tmp / "before", tmp / "after"


def test_the_step_files_keep_one_schema_whether_steps_ran(demo_reports: tuple[Path, Path]) -> None:
    before, after = demo_reports
    teachers = {r["teacher"] for r in _rows(before / "teacher_metrics.csv")}
    for name in CSVS:
        assert _header(before / name) == _header(after / name), name
        assert len(_rows(before / name)) == len(_rows(after / name)), name
        assert {r["status"] for r in _rows(before / name)} == {NOT_RUN}, name
    effects = _rows(before / "step_effects.csv")
    assert len(effects) == (len(teachers) + 1) * len(FEATURES) * len(OUTCOMES)
    assert len(_rows(before / "step_logistic.csv")) == (len(teachers) + 1) * len(OUTCOMES) * len(LOGIT_TERMS)
    assert {r["scope"] for r in _rows(before / "student_agreement.csv")} == teachers | {"all"}
    empty, full = pl.read_parquet(before / "step_events.parquet"), pl.read_parquet(after / "step_events.parquet")
    assert empty.height == 0 and full.height > 0 and empty.schema == full.schema
    assert empty.columns[:4] == ["teacher", "dataset", "problem_id", "trace_id"]
    assert set(full["teacher"]) <= teachers and full["problem_id"].null_count() == 0
    ran = {r["status"] for r in _rows(after / "step_effects.csv")}
    assert "computed" in ran and NOT_RUN not in ran
    # coverage: the step events of each (teacher, dataset), not run, then computed on the traces with events
    cov = [r for r in _rows(before / "coverage.csv") if r["metric"] == "step_events"]
    assert cov and {(r["stage"], r["status"], r["detail"]) for r in cov} == {("step_events", "not run", "legival step-events --db DB")}
    cov = [r for r in _rows(after / "coverage.csv") if r["metric"] == "step_events"]
    assert {r["status"] for r in cov} == {"computed"} and all(int(r["n"]) > 0 for r in cov)
    # the paper-style section
    page = (before / "index.html").read_text(encoding="utf-8")
    section = page.split('<section id="pf-steps"', 1)[1].split("</section>", 1)[0]
    assert "Where readers get lost" in section and NOT_RUN in section and "not causation" in section.lower()
    page = (after / "index.html").read_text(encoding="utf-8")
    section = page.split('<section id="pf-steps"', 1)[1].split("</section>", 1)[0]
    assert NOT_RUN not in section and 'data-name="step_effects.png"' in section
    assert 'data-file="student_agreement.csv"' in section and "not causation" in section.lower()
    assert (after / "step_effects.png").stat().st_size > 0


def test_without_efficiency_the_backtracking_and_redundancy_rows_say_not_run(tmp_path: Path) -> None:
    db = tmp_path / "bare.duckdb"
    build_store(db, efficiency=False)
    assert legival("step-events", "--db", str(db)).returncode == 0
    _report(db, tmp_path / "out")
    effects = _rows(tmp_path / "out" / "step_effects.csv")
    for feature in ("backtracking", "redundant"):
        got = {r["status"] for r in effects if r["feature"] == feature}
        assert got == {"not run: legival efficiency --db DB"}, (feature, got)
    logit = {r["term"]: r["status"] for r in _rows(tmp_path / "out" / "step_logistic.csv")
             if r["scope"] == "all" and r["outcome"] == "drop"}
    assert logit["backtracking"] == logit["max_cos"] == "not in the model: not run: legival efficiency --db DB"


def _figure_texts(db: Path, out: Path) -> tuple[list[str], list[str]]:
    """The row texts of step_effects.png as drawn, and the feature ticks."""
    import matplotlib.pyplot as plt

    with Store(db) as store:
        data = build_reports(store, out, ReportConfig(resamples=0)).data
    assert data is not None
    fig = step_effects_figure(data)
    try:
        return ([t.get_text() for ax in fig.axes for t in ax.texts],
                [t.get_text() for t in fig.axes[0].get_yticklabels()])
    finally:
        plt.close(fig)


def test_the_figure_draws_every_feature_and_every_rows_status(tmp_path: Path) -> None:
    from legival_core.stages.step_events import compute_step_events

    db = tmp_path / "s.duckdb"
    build_store(db, efficiency=False)
    rows = 2 * len(FEATURES) * len(OUTCOMES)  # scopes t and all
    texts, ticks = _figure_texts(db, tmp_path / "before")
    assert ticks == list(FEATURES)
    assert len(texts) == rows and all(t.endswith(NOT_RUN) for t in texts)  # every row labelled, none absent
    with Store(db) as store:
        compute_step_events(store)
    texts, ticks = _figure_texts(db, tmp_path / "after")
    assert ticks == list(FEATURES) and len(texts) == rows  # 4 traces: no estimate, every row says why
    assert sum(t.endswith("not run: legival efficiency --db DB") for t in texts) == 2 * 2 * 2  # 2 features
    assert sum("too few events" in t for t in texts) == rows - 8 and not any(NOT_RUN in t for t in texts)
    assert {t.split(": ", 1)[0] for t in texts} == {"t", "all teachers"}


def test_the_report_on_collinear_features_writes_its_files(tmp_path: Path) -> None:
    """The synthetic store adds 20 prompt tokens per step (tokens_added = 20 x n_steps exactly): the
    logistic model once died there with an OverflowError (issue 41 review); now the collinear term is
    left out with its reason and the report writes every file."""
    from tests.synthetic import fill_synthetic

    db = tmp_path / "syn.duckdb"
    with Store(db) as s, s.transaction():
        fill_synthetic(s, traces_per_cell=30)
    assert legival("step-events", "--db", str(db)).returncode == 0
    _report(db, tmp_path / "out")
    logit = _rows(tmp_path / "out" / "step_logistic.csv")
    assert logit and all(r["status"] for r in logit)
    collinear = {r["status"] for r in logit if r["term"] == "n_steps" and r["status"] != "computed"}
    assert any(s.startswith("not in the model: collinear with tokens_added") for s in collinear), collinear
