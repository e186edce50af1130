"""The local deployment path on a real `prefect server start` (loopback, free port): a process work
pool, `prefect deploy` of the generated prefect.yaml, a worker, a triggered run that completes; the
flow run and its task runs are checked through the REST API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.flows._orchestration import write_spec

PREFECT = [sys.executable, "-m", "prefect"]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "HF_HUB_OFFLINE": "1",
           # a loaded CI machine: let SQLite wait for its lock rather than answer 503 after 10 s
           "PREFECT_SERVER_DATABASE_TIMEOUT": "60"}
    log = open(home / "server.log", "wb")  # noqa: SIM115  (outlives this block: the server writes to it)
    p = subprocess.Popen([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert p.poll() is None, (home / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "prefect server did not become healthy"
            time.sleep(0.5)
        yield api, env
    finally:
        _stop(p)
        log.close()


class _RetryOn503(httpx.HTTPTransport):
    """Retries what the Prefect server marks retryable (503: its SQLite database was busy, as on a
    loaded CI machine), as Prefect's own client does; a raw httpx client would fail the test."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(10):
            response = super().handle_request(request)
            if response.status_code != 503 or attempt == 9:
                return response
            response.close()
            time.sleep(min(0.5 * 2**attempt, 5.0))
        raise AssertionError("unreachable")


def _api_client(api: str) -> httpx.Client:
    return httpx.Client(base_url=api, timeout=30, transport=_RetryOn503())


def _cli(env: dict[str, str], *args: str) -> str:
    p = subprocess.run([*PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p.stdout


SPEC_NAME = "orch-test"
TEACHER = "gpt-oss-20b"
SHARD_KEY = "transfer-gpt-oss-20b-x-gsm8k-x-scripted"


def _post(c: httpx.Client, path: str, body: dict) -> list[dict]:
    return c.post(path, json=body).raise_for_status().json()


def _run_log(c: httpx.Client, run_id: str, last: str, timeout_s: float = 60) -> list[str]:
    """The flow run's log lines, once `last` (a prefix) is among them: the flow-run process sends its
    log in batches, after the run's final state too."""
    deadline = time.monotonic() + timeout_s
    while True:
        logs = [x["message"] for x in _post(c, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}},
                                                                "sort": "TIMESTAMP_DESC", "limit": 200})]
        if any(m.startswith(last) for m in logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def test_deploy_and_run_on_local_server(server, tmp_path: Path) -> None:
    """Deploy, run the per-teacher deployment on a worker with `--limit 1` (docs/runbook.md), and
    check what the UI shows: run names, tags, the benchmark run's progress and ranking artifacts, its
    log, and a shard progress artifact seen at intermediate values while the run was going."""
    from deployments.build import render_prefect_yaml
    from legival_core.run_config import load_spec

    api, env = server
    pool = "legival-test"
    # 3 traces and `traces_per_chunk: 4`: one chunk, a 0 -> 100% jump, unless the shard task lowers
    # the chunk of a small shard (tasks/transfer.py); the scripted student's delay keeps each
    # committed trace visible for seconds.
    spec = write_spec(tmp_path, [TEACHER], limit=3, delay_s=0.15, name=SPEC_NAME,
                      quality={"enabled": True, "metrics": ["clarity", "cohesion", "z3"]},
                      execution={"local_cpus": 2, "max_concurrent_engines": 1, "traces_per_chunk": 4})
    prefect_file = tmp_path / "prefect.yaml"
    prefect_file.write_text(render_prefect_yaml(load_spec(spec), str(spec), pool=pool))
    _cli(env, "work-pool", "create", pool, "--type", "process")
    _cli(env, "deploy", "--all", "--prefect-file", str(prefect_file))

    c = _api_client(api)
    dep = c.get("/deployments/name/benchmark/benchmark").raise_for_status().json()
    assert dep["entrypoint"] == "flows/benchmark.py:benchmark"
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * 1"]
    teacher_dep = c.get(f"/deployments/name/benchmark/teacher-{TEACHER}").raise_for_status().json()
    assert teacher_dep["parameters"]["teachers"] == [TEACHER]

    run = c.post(f"/deployments/{teacher_dep['id']}/create_flow_run", json={}).raise_for_status().json()
    wlog = open(tmp_path / "worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", pool, "--limit", "1"], cwd=REPO, env=env,
                              stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[str, set[float]] = {}  # shard artifact key -> progress values observed while running
    try:
        deadline = time.monotonic() + 400
        while True:
            state = c.get(f"/flow_runs/{run['id']}").raise_for_status().json()["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, f"flow run still {state}"
            for a in _post(c, "/artifacts/filter", {"artifacts": {"key": {"like_": "transfer-%"}}}):
                seen.setdefault(a["key"], set()).add(float(a["data"]))
            time.sleep(0.2)
        # before the worker (and the run's process, which may still be sending its log) stops
        logs = _run_log(c, run["id"], "dashboard: ") if state == "COMPLETED" else []
    finally:
        _stop(worker)
        wlog.close()
    assert state == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]

    flow_runs = _post(c, "/flow_runs/filter", {})
    ids = [fr["id"] for fr in flow_runs]
    assert {fr["state"]["type"] for fr in flow_runs if fr["id"] != run["id"]} <= {"COMPLETED", "SCHEDULED"}
    ours = [fr for fr in flow_runs if fr["id"] == run["id"] or fr["parent_task_run_id"]]
    names = {fr["name"] for fr in ours}
    assert f"benchmark {SPEC_NAME} ({TEACHER})" in names, names  # its stages are its own task runs
    tags = {"legival", f"spec:{SPEC_NAME}", f"teacher:{TEACHER}"}  # the deployment's tag, and the run's
    for fr in ours:
        assert {f"spec:{SPEC_NAME}", f"teacher:{TEACHER}"} <= set(fr["tags"]), (fr["name"], fr["tags"])
    assert tags <= set(next(fr for fr in ours if fr["id"] == run["id"])["tags"])

    tasks = _post(c, "/task_runs/filter", {"flow_runs": {"id": {"any_": ids}}})
    states = {t["name"]: t["state"]["type"] for t in tasks}
    stage_runs = {f"ingest {TEACHER}", "grade", "efficiency", f"transfer {TEACHER} x gsm8k x scripted",
                  "judge lexical", "quality clarity,cohesion,z3", "report"}
    assert stage_runs <= set(states), sorted(states)
    assert set(states.values()) == {"COMPLETED"}, json.dumps(states)
    for t in tasks:
        if t["name"] in stage_runs:
            assert {f"spec:{SPEC_NAME}", f"teacher:{TEACHER}"} <= set(t["tags"]), (t["name"], t["tags"])

    # The shard's artifact moved through intermediate values (one update per committed batch).
    assert SHARD_KEY in seen, seen
    assert any(0 < v < 100 for v in seen[SHARD_KEY]), seen
    shard_art = _post(c, "/artifacts/filter", {"artifacts": {"key": {"any_": [SHARD_KEY]}}})
    assert [float(a["data"]) for a in shard_art] == [100.0]

    # The benchmark run itself: overall progress and the rank table.
    arts = {a["key"]: a for a in _post(c, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})}
    progress = arts[f"benchmark-{SPEC_NAME}"]
    assert progress["type"] == "progress" and float(progress["data"]) == 100.0
    assert "done, 8 / 8 stages" in progress["description"] and "elapsed" in progress["description"]
    assert "rollouts" in progress["description"]
    ranking = arts[f"ranking-{SPEC_NAME}"]
    assert ranking["type"] == "markdown"
    assert f"| {TEACHER} |" in ranking["data"] and "| teacher | accuracy" in ranking["data"]
    assert str(tmp_path / "report" / "index.html") in ranking["data"]

    assert any(m.startswith("summary: ") and "rollouts_generated=" in m for m in logs), (len(logs), logs[:20])
    assert any(m.startswith("report: ") for m in logs) and any(m.startswith("dashboard: ") for m in logs), logs
