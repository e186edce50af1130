"""Run records and the run-over-run diff (issue 17): the diff's maths by hand, and run records of the
real demo store (real traces, real SmolLM2 / Gemma rollouts) across a rerun and a changed parameter."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from legival_core.runs.diff import (
    RunNotFound,
    RunSnapshot,
    changes,
    diff_runs,
    parse_fail_on,
    regressions,
    resolve_run,
)
from legival_core.runs.record import RunInfo, snapshot_schema
from legival_core.store import Store
from legival_core.store import runs as run_reads
from tests._cli import Ran, legival
from tests.conftest import REPO


def _samples(values: list[float]) -> bytes:
    return np.asarray(values, dtype=np.float32).tobytes()


def _snap(run_id: str, seq: int, rows: list[dict[str, Any]], versions: dict[str, Any] | None = None,
          inputs: dict[str, Any] | None = None) -> RunSnapshot:
    full = [{"ci_low": None, "ci_high": None, "rank": None, "samples": None, **r} for r in rows]
    return RunSnapshot({"run_id": run_id, "seq": seq, "versions": versions or {}, "inputs": inputs or {},
                        "counts": {}}, pl.DataFrame(full, schema=snapshot_schema()))


def _inputs(**teachers: int) -> dict[str, Any]:
    return {f"{t}|gsm8k": {"n_traces": n, "ids_md5": f"md5-{t}-{n}", "rollouts": {"smollm2-135m": 2 * n}}
            for t, n in teachers.items()}


def test_identical_runs_give_an_empty_diff() -> None:
    rows = [{"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.25, "rank": 1.0, "samples": _samples([0.2, 0.3])},
            {"teacher": "a", "dataset": "gsm8k", "metric": "accuracy", "value": None}]
    v = {"students": {"smollm2-135m": "k1"}}
    assert diff_runs(_snap("r1", 1, rows, v, _inputs(a=4)), _snap("r2", 2, rows, v, _inputs(a=4))).height == 0


def test_delta_interval_of_the_difference_and_causes_by_hand() -> None:
    old_rows = [
        {"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.30, "rank": 1.0,
         "samples": _samples([0.30, 0.32, 0.28, 0.31])},
        {"teacher": "b", "dataset": "all", "metric": "fotu", "value": 0.20, "rank": 2.0,
         "samples": _samples([0.20, 0.21, 0.19, 0.20])},
        {"teacher": "a", "dataset": "all", "metric": "redundancy", "value": 0.10, "rank": 1.0},
    ]
    new_rows = [
        {"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.10, "rank": 2.0,
         "samples": _samples([0.10, 0.12, 0.09, 0.11])},
        {"teacher": "b", "dataset": "all", "metric": "fotu", "value": 0.20, "rank": 1.0,
         "samples": _samples([0.20, 0.21, 0.19, 0.20])},
        {"teacher": "a", "dataset": "all", "metric": "redundancy", "value": 0.12, "rank": 1.0},
    ]
    vo = {"students": {"smollm2-135m": "k1"},
          "metric:redundancy": {"params": {"tau": 0.8, "model": "m"}, "code_version": "1"}}
    vn = {"students": {"smollm2-135m": "k1", "gemma-3-270m": "k2"},
          "metric:redundancy": {"params": {"tau": 0.7, "model": "m"}, "code_version": "2"}}
    io, in_ = _inputs(a=4, b=4), _inputs(a=6, b=4)
    d = diff_runs(_snap("r1", 1, old_rows, vo, io), _snap("r2", 2, new_rows, vn, in_))
    by = {(r["teacher"], r["metric"]): r for r in d.iter_rows(named=True)}
    assert set(by) == {("a", "fotu"), ("b", "fotu"), ("a", "redundancy")}

    fa = by[("a", "fotu")]
    assert fa["change"] == "changed" and fa["delta"] == pytest.approx(-0.2)
    diffs = np.float32([0.10, 0.12, 0.09, 0.11]).astype(float) - np.float32([0.30, 0.32, 0.28, 0.31]).astype(float)
    assert fa["diff_ci_low"] == pytest.approx(np.percentile(diffs, 2.5))
    assert fa["diff_ci_high"] == pytest.approx(np.percentile(diffs, 97.5))
    assert fa["outside_ci"] is True and (fa["rank_old"], fa["rank_new"]) == (1.0, 2.0)
    # a transfer metric: the new student and the new traces and rollouts are its causes
    assert "new student: gemma-3-270m" in fa["cause"] and "new traces: gsm8k +2" in fa["cause"]
    assert "new rollouts: gsm8k smollm2-135m +4" in fa["cause"]

    fb = by[("b", "fotu")]  # value unchanged, rank moved: a rank row with delta 0
    assert fb["change"] == "rank" and fb["delta"] == 0.0 and fb["cause"] == "other teachers' values changed"

    ra = by[("a", "redundancy")]  # no replicates: no interval
    assert ra["outside_ci"] is None and ra["diff_ci_low"] is None
    assert "parameters changed: redundancy (tau 0.8 -> 0.7)" in ra["cause"]
    assert "code version changed: redundancy (1 -> 2)" in ra["cause"]
    assert "student" not in ra["cause"]  # redundancy does not depend on the students


def test_teachers_added_and_removed_are_one_row_each_and_explain_rank_moves() -> None:
    old = [{"teacher": "a", "dataset": "all", "metric": "accuracy", "value": 0.5, "rank": 1.0},
           {"teacher": "gone", "dataset": "all", "metric": "accuracy", "value": 0.4, "rank": 2.0}]
    new = [{"teacher": "a", "dataset": "all", "metric": "accuracy", "value": 0.5, "rank": 2.0},
           {"teacher": "new", "dataset": "all", "metric": "accuracy", "value": 0.9, "rank": 1.0},
           {"teacher": "new", "dataset": "all", "metric": "fotu", "value": 0.3, "rank": 1.0}]
    d = diff_runs(_snap("r1", 1, old, inputs=_inputs(a=4, gone=3)), _snap("r2", 2, new, inputs=_inputs(a=4, new=5)))
    rows = list(d.iter_rows(named=True))
    assert [(r["teacher"], r["change"]) for r in rows[:2]] == [("new", "teacher added"), ("gone", "teacher removed")]
    assert rows[0]["cause"] == "5 traces on gsm8k in the store" and rows[0]["metric"] == ""
    (moved,) = rows[2:]
    assert (moved["teacher"], moved["change"], moved["rank_old"], moved["rank_new"]) == ("a", "rank", 1.0, 2.0)
    assert moved["cause"] == "teachers added: new; teachers removed: gone"


def test_fail_on_parses_and_respects_the_direction() -> None:
    rule = parse_fail_on("fotu:0.05")
    assert (rule.metric, rule.delta, rule.direction) == ("fotu", 0.05, "higher")
    for bad, fragment in [("fotu", "METRIC:DELTA"), ("fotu:x", "not a number"), ("fotux:0.1", "did you mean fotu"),
                          ("n_traces:1", "unknown metric"), ("rr_count:1", "no better direction"),
                          ("fotu:-1", "non-negative")]:
        with pytest.raises(ValueError, match=fragment):
            parse_fail_on(bad)
    frame = diff_runs(
        _snap("r1", 1, [{"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.30},
                        {"teacher": "a", "dataset": "all", "metric": "redundancy", "value": 0.30},
                        {"teacher": "a", "dataset": "gsm8k", "metric": "fotu", "value": 0.30}]),
        _snap("r2", 2, [{"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.24},
                        {"teacher": "a", "dataset": "all", "metric": "redundancy", "value": 0.24},
                        {"teacher": "a", "dataset": "gsm8k", "metric": "fotu", "value": 0.10}]))
    assert regressions(frame, [parse_fail_on("fotu:0.05")]) == ["a: fotu 0.3 -> 0.24 (worse by 0.06 > 0.05)"]
    assert regressions(frame, [parse_fail_on("fotu:0.07")]) == []  # the per-dataset row does not gate
    assert regressions(frame, [parse_fail_on("redundancy:0.01")]) == []  # lower redundancy is better
    vanished = diff_runs(_snap("r1", 1, [{"teacher": "a", "dataset": "all", "metric": "fotu", "value": 0.3}]),
                         _snap("r2", 2, [{"teacher": "a", "dataset": "all", "metric": "fotu", "value": None}]))
    assert regressions(vanished, [parse_fail_on("fotu:0.5")]) == ["a: fotu 0.3 -> missing (no value in the newer run)"]


def test_causes_follow_each_metrics_own_inputs() -> None:
    from legival_core.runs.record import dependencies

    versions = {"metric:token_len": {}, "metric:step_len": {}, "metric:redundancy": {}, "metric:backtracking": {},
                "metric:clarity_clx": {}, "metric:cohesion": {}, "metric:rm:skywork": {}, "students": {}, "graders": {},
                "bins": {}, "bootstrap": {}, "judge": [], "monitor": []}
    assert dependencies("accuracy", versions) == ["graders"]
    assert dependencies("token_len_norm", versions) == ["graders", "metric:token_len"]
    assert dependencies("token_len_median", versions) == ["metric:token_len"]
    assert dependencies("backtracking", versions) == ["metric:backtracking", "judge"]
    assert dependencies("fotu", versions) == ["students", "graders", "bins"]
    assert dependencies("cohesion", versions) == ["metric:cohesion"]
    assert set(dependencies("global_index", versions)) == {"metric:clarity_clx", "metric:cohesion"}
    assert dependencies("monitor_f1", versions) == ["monitor"]
    # a derived column's stored inputs are declared on its MetricInfo, not guessed from its name
    from legival_core.metrics.base import metrics_from

    assert {m.name: [tm.name for tm in m.inputs] for m in metrics_from("derived", "grades")} == \
        {"accuracy": [], "token_len_norm": ["token_len"]}


def test_markdown_artifact_escapes_trace_controlled_names() -> None:
    from legival_core.runs.diff import Changes, diff_markdown

    bad = "<img src=x onerror=alert(1)>|t"
    d = diff_runs(_snap("r1", 1, [{"teacher": bad, "dataset": "all", "metric": "fotu", "value": 0.3}]),
                  _snap("r2", 2, [{"teacher": bad, "dataset": "all", "metric": "fotu", "value": 0.2}]))
    md = diff_markdown(Changes(d, _snap("r1", 1, []), _snap("r2", 2, []), 2))
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;\\|t" in md


def test_resolve_run_by_id_prefix_and_number() -> None:
    runs = pl.DataFrame({"run_id": ["20261201T100000-aaaaaa", "20261201T110000-bbbbbb"], "seq": [1, 2]})
    assert resolve_run(runs, "2")["run_id"].endswith("bbbbbb")
    assert resolve_run(runs, "#1")["seq"] == 1
    assert resolve_run(runs, "20261201T11")["seq"] == 2
    with pytest.raises(RunNotFound, match="ambiguous"):
        resolve_run(runs, "20261201T1")
    with pytest.raises(RunNotFound, match="no run 'zzz'.*#2 20261201T110000-bbbbbb"):
        resolve_run(runs, "zzz")


# --- on the real demo store --------------------------------------------------------------------------------


def _report(store: Store, out: Path, efficiency: Any = None) -> Any:
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.reports.stage import ReportStage
    from legival_core.run_config import Efficiency
    from legival_core.stages.base import run_stage

    info = RunInfo("legival-demo", "hash", datetime.now(UTC), counts={"new_traces": 0})
    return run_stage(ReportStage(out, ReportConfig(efficiency or Efficiency()), record=info), store)


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.core.reports.test_demo_snapshot import load_demo_store

    db = tmp_path_factory.mktemp("runs") / "demo.duckdb"
    load_demo_store(db)
    return db


def test_rerun_records_runs_and_a_changed_tau_recomputes_only_redundancy(demo_db: Path, tmp_path: Path) -> None:
    from legival_core.run_config import Efficiency
    from legival_core.stages.base import run_stage
    from legival_core.stages.efficiency import EfficiencyStage

    with Store(demo_db) as store:
        first = _report(store, tmp_path / "r1")
        assert first.recorded.seq == 1 and first.report.changes.note.startswith("needs two recorded runs")
        assert pl.read_csv(tmp_path / "r1" / "diff.csv").columns[:3] == ["from_run", "to_run", "teacher"]
        second = _report(store, tmp_path / "r2")
        assert second.report.changes.frame.height == 0  # identical runs: empty diff
        page = (tmp_path / "r2" / "index.html").read_text()
        assert 'id="changes"' in page and "no change: every value and rank equals" in page

        rec = run_reads.run_metric_rows(store, first.recorded.run_id)
        fotu = rec.filter((pl.col("metric") == "fotu") & (pl.col("dataset") == "all"))
        assert fotu.height == 5 and fotu["samples"].null_count() == 0 and fotu["rank"].null_count() == 0
        assert (fotu["ci_low"] <= fotu["value"]).all() and (fotu["value"] <= fotu["ci_high"]).all()
        per_dataset = rec.filter((pl.col("metric") == "fotu") & (pl.col("dataset") == "gsm8k"))
        assert per_dataset.height == 5 and per_dataset["ci_low"].null_count() == 0
        versions = json.loads(run_reads.runs(store)["versions"][0])
        assert versions["metric:redundancy"]["params"]["tau"] == 0.8
        assert set(versions["students"]) == {"smollm2-135m", "gemma-3-270m"}

        before = {t: store.count(t) for t in ("rollouts", "sentence_embeddings", "step_similarity", "judge_results")}
        n_rows = store.count("trace_metrics")
        changed = Efficiency(tau=0.5)
        eff = run_stage(EfficiencyStage(changed), store)
        assert eff.redundancy_rows == 80 and eff.length_rows == 0 and eff.encoded_sentences == 0
        assert store.count("trace_metrics") == n_rows + 80  # redundancy rows for the new tau only
        assert {t: store.count(t) for t in before} == before
        third = _report(store, tmp_path / "r3", changed)
    d = third.report.changes.frame
    assert set(d["metric"]) == {"redundancy"} and set(d["dataset"]) == {"all", "gsm8k"}
    teachers = set(d["teacher"])
    assert len(teachers) == 5
    assert all(c == "parameters changed: redundancy (tau 0.8 -> 0.5)" for c in d["cause"])
    assert pl.read_csv(tmp_path / "r3" / "diff.csv").height == d.height


def test_a_code_version_bump_recomputes_that_metric_only(demo_db: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A new code version of token_len (the registry entry a code change would bump): the efficiency
    stage recomputes token_len rows only, and the run record carries the new version."""
    import legival_core.metrics.base as base
    from legival_core.metrics.token_len import TOKEN_LEN
    from legival_core.run_config import Efficiency
    from legival_core.stages.base import run_stage
    from legival_core.stages.efficiency import EfficiencyStage

    with Store(demo_db) as store:
        _report(store, tmp_path / "before")
        bumped = replace(TOKEN_LEN, version="2-test")
        real = base.stored_trace_metrics
        monkeypatch.setattr(base, "stored_trace_metrics",
                            lambda stage=None: [bumped if m.name == "token_len" else m for m in real(stage)])
        for mod in ("legival_core.stages.efficiency", "legival_core.reports.compute.trace_table", "legival_core.runs.record"):
            monkeypatch.setattr(f"{mod}.stored_trace_metrics", base.stored_trace_metrics)
        eff = run_stage(EfficiencyStage(Efficiency()), store)
        assert eff.length_rows == 80 and eff.redundancy_rows == 0 and eff.encoded_sentences == 0
        after = _report(store, tmp_path / "after")
    ch = after.report.changes
    assert ch.old.run["versions"]["metric:token_len"]["code_version"] == "1"
    assert ch.new.run["versions"]["metric:token_len"]["code_version"] == "2-test"
    # the same tokenizer counts the same tokens: recomputed, and no value moved (the cause phrase of a
    # version change that does move values is checked by hand above)
    assert ch.frame.height == 0


def _cli(*args: str) -> Ran:
    return legival(*args, cwd=REPO)


def test_diff_command_gates_on_a_constructed_regression(tmp_path: Path) -> None:
    db = tmp_path / "gate.duckdb"

    def run(run_id: str, fotu: float) -> None:
        rows = pl.DataFrame([{"teacher": "t1", "dataset": "all", "metric": "fotu", "value": fotu, "ci_low": None,
                              "ci_high": None, "rank": 1.0, "samples": None}], schema=snapshot_schema())
        now = datetime.now(UTC).replace(tzinfo=None)
        with Store(db) as s:
            run_reads.add_run(s, {"run_id": run_id, "spec_name": "s", "spec_hash": "h", "started_at": now,
                                  "ended_at": now, "counts": "{}", "versions": "{}", "inputs": "{}",
                                  "n_resamples": 0, "seed": 0}, rows)

    run("r-base", 0.40)
    run("r-same", 0.40)
    ok = _cli("diff", "--db", str(db), "--fail-on", "fotu:0.05")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.splitlines()[-1])["changes"] == 0
    run("r-worse", 0.30)
    bad = _cli("diff", "--db", str(db), "--fail-on", "fotu:0.05", "--out", str(tmp_path / "d.csv"))
    assert bad.returncode == 1, bad.stderr
    summary = json.loads(bad.stdout.splitlines()[-1])
    assert summary["regressions"] == ["t1: fotu 0.4 -> 0.3 (worse by 0.1 > 0.05)"]
    assert "regression: t1: fotu" in bad.stdout and pl.read_csv(tmp_path / "d.csv").height == 1
    once = _cli("diff", "--db", str(db), "--from", "r-base", "--to", "r-same", "--fail-on", "fotu:0.05")
    assert once.returncode == 0 and json.loads(once.stdout.splitlines()[-1])["changes"] == 0
    run("r-better", 0.45)
    better = _cli("diff", "--db", str(db), "--fail-on", "fotu:0.05")
    assert better.returncode == 0 and json.loads(better.stdout.splitlines()[-1])["changes"] == 1
    wrong = _cli("diff", "--db", str(db), "--from", "nope")
    assert wrong.returncode == 2 and "error: no run 'nope'" in wrong.stderr and "Traceback" not in wrong.stderr
    backwards = _cli("diff", "--db", str(db), "--from", "4", "--to", "1")
    assert backwards.returncode == 2 and "--from must name an older run than --to" in backwards.stderr
    nothing = _cli("diff", "--db", str(db), "--fail-on", "sotu:0.1")
    assert nothing.returncode == 0 and "warning: --fail-on sotu: no teacher has a value" in nothing.stderr
    assert json.loads(nothing.stdout.splitlines()[-1])["fail_on_unmatched"] == ["sotu"]
    listing = _cli("runs", "--db", str(db))
    assert listing.returncode == 0
    assert [r["run_id"] for r in json.loads(listing.stdout.splitlines()[-1])["runs"]] == [
        "r-base", "r-same", "r-worse", "r-better"]


def test_a_store_without_runs_says_so(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    Store(db).close()
    with Store(db, read_only=True) as s:
        ch = changes(s)
    assert ch.frame.height == 0 and ch.note is not None and "the store has 0" in ch.note
    p = _cli("diff", "--db", str(db), "--fail-on", "fotu:0.05")
    assert p.returncode == 0 and "needs two recorded runs" in p.stdout
