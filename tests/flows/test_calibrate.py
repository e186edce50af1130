"""`legival calibrate SPEC` (issue 28) on a real Prefect and a real local Ray, with the scripted student:
the sample's rollouts and timings stored under a `calibrate-...` run, then reused by the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._cli import legival
from tests.flows._orchestration import prefect_harness, ray_down, write_spec  # noqa: F401
from tests.flows.test_generate_flow import GEN

pytestmark = pytest.mark.usefixtures("prefect_harness", "ray_down")


def test_calibrate_a_sample_then_run_reuses_it(tmp_path: Path) -> None:
    import duckdb

    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b"], limit=3)
    cal = legival("calibrate", str(spec), "--traces", "1").summary()
    assert cal["command"] == "calibrate" and cal["run_id"].startswith("calibrate-")
    assert cal["teachers"] == ["gpt-oss-20b", "qwen3-4b"] and cal["traces_per_cell"] == 1
    assert cal["rollouts_generated"] == cal["rollouts_total"] > 0 and cal["engines_loaded"] >= 1
    assert cal["plan_vs_actual"]["rollouts"] == {"planned": cal["rollouts_generated"], "actual": cal["rollouts_generated"]}
    # the scripted model has no throughput row: the plan says why it has no time, never a made-up one
    assert cal["calibration"]["scripted"]["basis"] == "unavailable"
    assert "no parameter count for model 'scripted-demo-v1'" in cal["calibration"]["scripted"]["source"]
    con = duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True)
    try:
        per_teacher = dict(con.execute("SELECT teacher, sum(rollouts) FROM transfer_timings WHERE run_id = ? "
                                       "AND source = 'calibrate' GROUP BY 1", [cal["run_id"]]).fetchall())
    finally:
        con.close()
    assert set(per_teacher) == {"gpt-oss-20b", "qwen3-4b"} and sum(per_teacher.values()) == cal["rollouts_generated"]

    run = legival("run", str(spec)).summary()
    assert run["rollouts_cached"] == cal["rollouts_generated"]  # the sample's rollouts are the run's too
    assert run["rollouts_generated"] == run["rollouts_total"] - cal["rollouts_generated"] > 0
    # a second calibration has nothing to roll out
    again = legival("calibrate", str(spec), "--traces", "1")
    assert again.summary()["rollouts_generated"] == 0 and again.summary()["engines_loaded"] == 0
    assert "nothing new was measured" in again.stdout and "--traces 2" in again.stdout


def test_calibrate_errors(tmp_path: Path) -> None:
    """Bad input is one error line (exit 2) before any flow starts; nothing is stored."""
    import yaml

    spec = write_spec(tmp_path, ["gpt-oss-20b"])
    legival("calibrate", str(spec), "--teacher", "nobody").error("nobody")
    legival("calibrate", str(tmp_path / "missing.yaml")).error("missing.yaml")
    r = legival("calibrate", str(spec), "--traces", "0")
    assert r.returncode == 2 and "--traces" in r.stderr and "Traceback" not in r.stderr
    data = yaml.safe_load(spec.read_text())
    data["teachers"] = [{"name": "gen", "generate": GEN}]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    legival("calibrate", str(spec)).error("no teacher has trace files to calibrate on")
    assert not (tmp_path / "store.duckdb").exists()
