"""`kill -9` of a running `legival run` mid-transfer, then a rerun: the store ends identical to an
uninterrupted run's, with no duplicate, and the rerun generates only what the killed run had not
committed; nothing the killed command started outlives it (issue 39). And the graceful way (issue
26): SIGTERM or SIGINT to the command, an exit within 15 s with a line saying what is stored, nothing
left running, and the same resume. One reference run for all. No test cleans up by killing a process
group: what is left is listed and fails the test (tests/flows/_lifecycle.py)."""

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
from tests.flows._lifecycle import Watched, assert_ended_cleanly, below, left_behind, send, start, wait_for
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


TEACHERS = ["gpt-oss-20b", "qwen3-4b"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env: dict[str, str]) -> tuple[Path, dict]:
    """The uninterrupted run every interrupted one is compared with: its folder and summary."""
    folder = tmp_path_factory.mktemp("reference")
    traces = small_traces(folder / "traces.jsonl")
    (folder / "a").mkdir()
    ref = _run(write_spec(folder / "a", TEACHERS, traces=traces), env)
    assert ref["rollouts_generated"] == ref["rollouts_total"] > 4
    return folder, ref


def _held_spec(tmp_path: Path, reference: tuple[Path, dict]) -> tuple[Path, Path]:
    """The reference's spec with an engine that answers two calls, then holds (tests/plugins/scripted.py)
    until the gate file exists: the interruption lands mid-transfer with some chunks committed,
    whatever the machine's speed. Returns the spec and the gate."""
    (tmp_path / "b").mkdir()
    gate = tmp_path / "gate"
    return write_spec(tmp_path / "b", TEACHERS, traces=reference[0] / "traces.jsonl",
                      backend_options={"hold_after": 2, "gate": str(gate)}), gate


def _start_held(spec: Path, progress: Path, env: dict[str, str]) -> Watched:
    """`legival run SPEC` in a session of its own, its output read through pipes, returned once two
    batches are committed (the held engine keeps it mid-transfer from then on)."""
    w = start(["run", str(spec), "--progress-file", str(progress)], env)
    wait_for(lambda: _committed(progress)[0] >= 2, w, 300, "two committed batches")
    return w


def test_kill_9_mid_transfer_then_resume(tmp_path: Path, env: dict[str, str], reference: tuple[Path, dict]) -> None:
    spec, gate = _held_spec(tmp_path, reference)
    ref = reference[1]

    progress = tmp_path / "progress.jsonl"
    w = _start_held(spec, progress, env)
    committed_seen, total = _committed(progress)
    assert 0 < committed_seen < ref["rollouts_total"]
    children = below(w.pid)
    w.proc.kill()  # the command only: what it started must end by itself (the guardian)
    w.wait(60)
    assert w.pipes_closed_within(10)
    left = left_behind(w, extra=children)
    assert not left, "still running after the command's SIGKILL:\n" + "\n".join(left)

    db = tmp_path / "b" / "store.duckdb"
    stored = _count(db, "SELECT count(*) FROM rollouts")
    assert committed_seen <= stored < ref["rollouts_total"]
    gate.touch()  # the rerun's engine never holds

    resumed = _run(spec, env)
    assert resumed["rollouts_cached"] == stored
    assert resumed["rollouts_generated"] == ref["rollouts_total"] - stored
    assert _count(db, "SELECT count(*) - count(DISTINCT (trace_id, student_key, k, sample)) FROM rollouts") == 0
    assert table_snapshot(db) == table_snapshot(reference[0] / "a" / "store.duckdb")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_cancel_signal_mid_transfer_exits_within_15_s_and_the_rerun_resumes(
        tmp_path: Path, env: dict[str, str], reference: tuple[Path, dict], sig: signal.Signals) -> None:
    spec, gate = _held_spec(tmp_path, reference)
    ref = reference[1]
    progress = tmp_path / "progress.jsonl"
    w = _start_held(spec, progress, env)
    t0 = send(w, sig)  # the command's process only, as Prefect or a scheduler does
    w.wait(60)
    elapsed = time.monotonic() - t0
    assert elapsed < 15, elapsed
    assert_ended_cleanly(w, 128 + sig)
    out, err = w.stdout, w.stderr
    line = next(ln for ln in err.splitlines() if ln.startswith("cancelled ("))
    assert f"cancelled ({sig.name}" in line and "rerun `legival run" in line, line
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["cancelled"] == sig.name

    db = tmp_path / "b" / "store.duckdb"
    stored = _count(db, "SELECT count(*) FROM rollouts")
    assert summary["rollouts_committed_by_this_run"] <= stored < ref["rollouts_total"]
    gate.touch()
    resumed = _run(spec, env)
    assert resumed["rollouts_cached"] == stored
    assert resumed["rollouts_generated"] == ref["rollouts_total"] - stored
    assert table_snapshot(db) == table_snapshot(reference[0] / "a" / "store.duckdb")


def _running_benchmark_run(spec: Path) -> str:
    """The id of the benchmark flow run of `spec` in progress, read from the Prefect API (its UI's view;
    a run killed by an earlier test of the session stays Running there)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentTaskRunId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])),
            parent_task_run_id=FlowRunFilterParentTaskRunId(is_null_=True)))
    (run,) = [r for r in runs if r.name.startswith("benchmark") and r.parameters.get("spec") == str(spec.resolve())]
    return str(run.id)


def test_a_cancel_from_the_prefect_api_stops_the_run_which_then_resumes(
        tmp_path: Path, env: dict[str, str], reference: tuple[Path, dict]) -> None:
    spec, gate = _held_spec(tmp_path, reference)
    ref = reference[1]
    progress = tmp_path / "progress.jsonl"
    w = _start_held(spec, progress, env)
    run_id = _running_benchmark_run(spec)
    cancel = subprocess.run([sys.executable, "-m", "prefect", "flow-run", "cancel", run_id], env=env,
                            capture_output=True, text=True, timeout=120)
    t0 = time.monotonic()
    assert cancel.returncode == 0, cancel.stderr + cancel.stdout
    w.wait(60)
    elapsed = time.monotonic() - t0
    assert elapsed < 15, elapsed
    assert_ended_cleanly(w, 128 + signal.SIGTERM)
    assert "cancelled (SIGTERM" in w.stderr, w.stderr[-3000:]
    db = tmp_path / "b" / "store.duckdb"
    stored = _count(db, "SELECT count(*) FROM rollouts")
    assert 0 < stored < ref["rollouts_total"]
    gate.touch()
    resumed = _run(spec, env)
    assert resumed["rollouts_cached"] == stored
    assert resumed["rollouts_generated"] == ref["rollouts_total"] - stored
    assert table_snapshot(db) == table_snapshot(reference[0] / "a" / "store.duckdb")
