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
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
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


def _cli(env: dict[str, str], *args: str) -> str:
    p = subprocess.run([*PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p.stdout


def test_deploy_and_run_on_local_server(server, tmp_path: Path) -> None:
    from deployments.build import render_prefect_yaml
    from legival_core.spec import load_spec

    api, env = server
    pool = "legival-test"
    spec = write_spec(tmp_path, ["gpt-oss-20b"], limit=2)
    prefect_file = tmp_path / "prefect.yaml"
    prefect_file.write_text(render_prefect_yaml(load_spec(spec), str(spec), pool=pool))
    _cli(env, "work-pool", "create", pool, "--type", "process")
    _cli(env, "deploy", "--all", "--prefect-file", str(prefect_file))

    c = httpx.Client(base_url=api, timeout=30)
    dep = c.get("/deployments/name/benchmark/benchmark").raise_for_status().json()
    assert dep["entrypoint"] == "flows/benchmark.py:benchmark"
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * 1"]
    teacher_dep = c.get("/deployments/name/benchmark/teacher-gpt-oss-20b").raise_for_status().json()
    assert teacher_dep["parameters"]["teachers"] == ["gpt-oss-20b"]

    run = c.post(f"/deployments/{teacher_dep['id']}/create_flow_run", json={}).raise_for_status().json()
    wlog = open(tmp_path / "worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", pool], cwd=REPO, env=env,
                              stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while True:
            state = c.get(f"/flow_runs/{run['id']}").raise_for_status().json()["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, f"flow run still {state}"
            time.sleep(1)
    finally:
        _stop(worker)
        wlog.close()
    assert state == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]

    flow_runs = c.post("/flow_runs/filter", json={}).raise_for_status().json()
    ids = [fr["id"] for fr in flow_runs]
    assert {fr["state"]["type"] for fr in flow_runs if fr["id"] != run["id"]} <= {"COMPLETED", "SCHEDULED"}
    tasks = c.post("/task_runs/filter", json={"flow_runs": {"id": {"any_": ids}}}).raise_for_status().json()
    names = {t["name"]: t["state"]["type"] for t in tasks}
    assert "ingest gpt-oss-20b" in names and "transfer gpt-oss-20b x gsm8k x scripted" in names
    assert any(n.startswith("aggregate") for n in names)
    assert set(names.values()) == {"COMPLETED"}, json.dumps(names)
    arts = c.post("/artifacts/filter", json={}).raise_for_status().json()
    assert any(a["type"] == "progress" and a["key"].startswith("transfer-") for a in arts)
