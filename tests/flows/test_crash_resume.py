"""`kill -9` of a running `legival run` (whole process group) mid-transfer, then a rerun: the store
ends identical to an uninterrupted run's, with no duplicate, and the rerun generates only what the
killed run had not committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.flows._orchestration import small_traces, table_snapshot, write_spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory, prefect_api: str) -> dict[str, str]:
    """The runs' environment: a Prefect home of their own, and the session's Prefect API (a run would
    otherwise start a temporary server of its own, ~20 s, each time)."""
    home = tmp_path_factory.mktemp("prefect-home")
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": prefect_api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}


def _run(spec: Path, env: dict[str, str], *extra: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "legival", "run", str(spec), *extra], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _committed(progress: Path) -> tuple[int, int]:
    if not progress.exists():
        return 0, 0
    last = [json.loads(x) for x in progress.read_text().splitlines() if '"transfer"' in x]
    return (last[-1]["committed"], sum({r["shard"]: r["total"] for r in last}.values())) if last else (0, 0)


def _count(db: Path, sql: str) -> int:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute(sql).fetchone()
        assert row is not None
        return int(row[0])
    finally:
        con.close()


def test_kill_9_mid_transfer_then_resume(tmp_path: Path, env: dict[str, str]) -> None:
    traces = small_traces(tmp_path / "traces.jsonl")
    teachers = ["gpt-oss-20b", "qwen3-4b"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ref_spec = write_spec(tmp_path / "a", teachers, traces=traces)
    # The engine answers two calls, then holds (tests/plugins/scripted.py) until the gate file exists:
    # the kill lands mid-transfer with some chunks committed, whatever the machine's speed.
    gate = tmp_path / "gate"
    spec = write_spec(tmp_path / "b", teachers, traces=traces, backend_options={"hold_after": 2, "gate": str(gate)})

    ref = _run(ref_spec, env)
    assert ref["rollouts_generated"] == ref["rollouts_total"] > 4

    progress = tmp_path / "progress.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "legival", "run", str(spec), "--progress-file", str(progress)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and _committed(progress)[0] < 2 and proc.poll() is None:
            time.sleep(0.05)  # the progress file is the only signal a separate process gives
        committed_seen, total = _committed(progress)
        assert proc.poll() is None, "the run finished before it could be killed"
        assert 0 < committed_seen < ref["rollouts_total"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

    db = tmp_path / "b" / "store.duckdb"
    stored = _count(db, "SELECT count(*) FROM rollouts")
    assert committed_seen <= stored < ref["rollouts_total"]
    gate.touch()  # the rerun's engine never holds

    resumed = _run(spec, env)
    assert resumed["rollouts_cached"] == stored
    assert resumed["rollouts_generated"] == ref["rollouts_total"] - stored
    assert _count(db, "SELECT count(*) - count(DISTINCT (trace_id, student_key, k, sample)) FROM rollouts") == 0
    assert table_snapshot(db) == table_snapshot(tmp_path / "a" / "store.duckdb")
