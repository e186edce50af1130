"""The report directory, the `legival report` command, extra teacher columns and `legival serve`."""

from __future__ import annotations

import csv
import json
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from legival_core.reports.compute.build import assemble
from legival_core.reports.render.dashboard import safe_json
from legival_core.reports.stage import ReportConfig, build_reports
from legival_core.rewards.models import RM_CODE_VERSION
from legival_core.store import Store
from tests._cli import legival
from tests._sql import sql
from tests.synthetic import fill_synthetic

CLI_TEACHER_DATASET = ["teacher", "dataset", "n_traces", "accuracy", "token_len_median", "step_len_median",
                       "redundancy", "backtracking", "backtracking_method", "fotu", "sotu", "regression_rate",
                       "n_transfer_traces", "student_baseline_acc"]
CLI_ROLLOUTS = ["teacher", "dataset", "problem_id", "trace_id", "student", "k", "m", "bin", "correct", "forced",
                "status", "prompt_tokens", "completion_tokens"]
FILES = {"teacher_dataset_metrics.csv", "teacher_metrics.csv", "correlations.csv", "rollouts.parquet",
         "traces.parquet", "pareto.png", "correlations.png", "tu_curves.png", "redundancy_elbow.png",
         "rank_table.png", "index.html"}


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        fill_synthetic(store, teachers=("a", "b", "c", "d"), traces_per_cell=15, seed=2)
    return db


def _add_rm_scores(store: Store) -> None:
    """A reward model's rows as `legival rm` stores them: teacher means a 0.1, b 0.4, c 0.3, d 0.9."""
    ids = sql(store, "SELECT trace_id, teacher FROM traces")
    score = {"a": 0.1, "b": 0.4, "c": 0.3, "d": 0.9}
    store.insert_rows("trace_metrics", [
        {"trace_id": t, "metric": "rm:demo", "params": "{}", "code_version": RM_CODE_VERSION,
         "value": score[teacher], "method": "scalar", "status": "ok", "detail": None}
        for t, teacher in ids.iter_rows()])


def test_report_directory_contract(filled: Path, tmp_path: Path) -> None:
    with Store(filled) as store:
        _add_rm_scores(store)
        res = build_reports(store, tmp_path / "out", ReportConfig(resamples=100))
        n_rollouts = store.count("rollouts")
    out = tmp_path / "out"
    assert set(res.files) >= FILES and {p.name for p in out.iterdir()} >= FILES
    header = next(csv.reader((out / "teacher_dataset_metrics.csv").open()))
    assert header[: len(CLI_TEACHER_DATASET)] == CLI_TEACHER_DATASET
    tm = pl.read_csv(out / "teacher_metrics.csv")
    assert tm.height == 4 and tm["teacher"].to_list() == ["a", "b", "c", "d"]
    for c in ("rank_accuracy", "rank_fotu", "rank_change_fotu", "on_pareto_frontier", "fotu_ci_low",
              "rank_fotu_ci_high", "rank_fotu_indistinct_from", "rm_demo"):
        assert c in tm.columns, c
    assert tm.sort("teacher")["rm_demo"].to_list() == pytest.approx([0.1, 0.4, 0.3, 0.9])
    assert "rank_rm_demo" not in tm.columns  # the registry registers RMs undirected: not ranked
    assert tm["on_pareto_frontier"].sum() >= 1
    corr = pl.read_csv(out / "correlations.csv")
    assert "rm_demo" in corr["metric_b"].to_list() + corr["metric_a"].to_list()
    ro = pl.read_parquet(out / "rollouts.parquet")
    assert ro.columns == CLI_ROLLOUTS and ro.height == n_rollouts
    assert pl.read_parquet(out / "traces.parquet").height == 4 * 2 * 15
    html = (out / "index.html").read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert html.count("<script") == 2  # the JSON data block and the page script


def test_extra_columns_must_not_clash(filled: Path) -> None:
    from legival_core.reports.compute.build import compute_report

    with Store(filled) as store:
        data = compute_report(store, ReportConfig(resamples=0))
    with pytest.raises(ValueError, match="clash"):
        assemble(data.traces, data.students, data.transfer, pl.DataFrame({"trace_id": []}), ReportConfig(resamples=0),
                 [pl.DataFrame({"teacher": ["a"], "fotu": [1.0]})])


def test_safe_json_is_inert_in_html() -> None:
    s = safe_json({"t": "</script><!-- <script>x</script> & \u2028", "n": float("nan")})
    assert "<" not in s and ">" not in s and "&" not in s and "\u2028" not in s
    assert json.loads(s) == {"t": "</script><!-- <script>x</script> & \u2028", "n": None}


def test_report_cli(filled: Path, tmp_path: Path) -> None:
    p = legival("report", "--db", str(filled), "--out", str(tmp_path / "r"), "--resamples", "50")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["command"] == "report" and summary["teachers"] == 4
    assert set(summary["files"]) >= FILES
    assert "teacher x dataset" in p.stdout


def test_serve_live_api(filled: Path) -> None:
    from legival_core.reports.render.serve import make_server

    with Store(filled, read_only=True) as store, make_server(store, port=0, config=ReportConfig(resamples=20)) as server:
        base = server.url.rstrip("/")
        page = urllib.request.urlopen(base + "/", timeout=30).read().decode()
        assert '"live":true' in page
        rows = json.loads(urllib.request.urlopen(base + "/api/traces?teacher=b&dataset=math", timeout=30).read())
        assert len(rows) == 15 and {r["teacher"] for r in rows} == {"b"}
        tid = rows[0]["trace_id"]
        detail = json.loads(urllib.request.urlopen(base + "/api/trace?id=" + urllib.parse.quote(tid), timeout=30).read())
        assert detail["trace_id"] == tid and detail["steps"]
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(base + "/api/trace?id=nope", timeout=30)
