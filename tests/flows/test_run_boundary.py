"""`legival run` has the error boundary of the single commands (issue 38 items 2-4).

Each run is a real `legival run` process, as a user starts it (output through pipes), on the session's
Prefect API. A known condition is one `error:` line and exit 2: no traceback on the terminal (Prefect's
and the threads' go to the run's log, which the line names), no crash log, nothing created for a run
that is refused. A stage that fails as a whole for an outside reason (a judge endpoint refusing the
key) does not sink the run: every other stage and the report are stored, the report's coverage says
why the judge's numbers are missing, the summary is printed, then the line, exit 2.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.fakes import Canned
from tests.fakes.openai_server import FakeOpenAI
from tests.flows._orchestration import small_traces, write_spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> dict[str, str]:
    home = tmp_path_factory.mktemp("prefect-home")
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": prefect_api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_traces(tmp_path_factory.mktemp("traces") / "traces.jsonl", problems=2)


def _run(spec: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "legival", "run", str(spec), *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def assert_one_line(p: subprocess.CompletedProcess[str] | tuple[int, str], expect: str) -> str:
    """Exit 2, no traceback anywhere on stderr, the last line `error: ...` holding `expect`; the line."""
    rc, err = (p.returncode, p.stderr) if isinstance(p, subprocess.CompletedProcess) else p
    assert rc == 2, (rc, err[-3000:])
    assert "Traceback" not in err and "File \"" not in err, err[-5000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and expect in last, last
    return last


def _no_crash_logs(folder: Path) -> None:
    assert not list(folder.rglob("crash-*.log")), list(folder.rglob("crash-*.log"))


def test_a_second_run_on_a_store_another_run_holds_is_refused_before_it_starts(
        tmp_path: Path, env: dict[str, str], traces: Path) -> None:
    """Run A holds the store (its engine held mid-transfer); run B on the same store waits for it (one
    `note:` line naming run A), then is refused in one line naming run A before its Prefect flow starts:
    no --out directory, no crash log, A unharmed."""
    (tmp_path / "a").mkdir()
    gate = tmp_path / "gate"
    spec = write_spec(tmp_path / "a", ["gpt-oss-20b"], traces=traces, limit=1,
                      backend_options={"hold_after": 1, "gate": str(gate)})
    progress = tmp_path / "progress.jsonl"
    a = subprocess.Popen([sys.executable, "-m", "legival", "run", str(spec), "--progress-file", str(progress)],
                         cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (progress.exists() and '"transfer"' in progress.read_text()) and a.poll() is None:
            assert time.monotonic() < deadline, "run A never reached its transfer"
            time.sleep(0.05)  # the progress file is the only signal another process gives
        assert a.poll() is None, a.communicate()[1][-3000:]
        out = tmp_path / "b-report"
        b = _run(spec, {**env, "LEGIVAL_STORE_WAIT_S": "1"}, "--out", str(out))  # waits 1 s, then is refused
        last = assert_one_line(b, "holds it")
        assert f"`legival run {spec} --progress-file {progress}` (PID {a.pid}) holds it" in last, last  # named
        lines = b.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("note: waiting for ") and f"(PID {a.pid})" in lines[0], lines
        assert not out.exists()
        _no_crash_logs(tmp_path)
    finally:
        gate.touch()
        _, err = a.communicate(timeout=300)
    assert a.returncode == 0, err[-3000:]


def test_a_trace_file_removed_while_the_run_starts(tmp_path: Path, env: dict[str, str], traces: Path) -> None:
    """The spec's trace file is there when the command checks it and gone when the flow reads it
    (tests/plugins/vanishing_traces.py): one line naming the field and the file, the run's log named,
    no crash log, and no store left (the run created it and stored nothing)."""
    mine = tmp_path / "traces.jsonl"
    mine.write_bytes(traces.read_bytes())
    spec = write_spec(tmp_path, ["gpt-oss-20b"], traces=mine, limit=1)
    vanish = {**env, "LEGIVAL_PLUGINS": f"{env.get('LEGIVAL_PLUGINS', '')},tests.plugins.vanishing_traces",
              "LEGIVAL_TEST_VANISH": str(mine)}
    p = _run(spec, vanish)
    line = assert_one_line(p, "teachers.0.traces: trace file(s) not found")
    assert str(mine) in line and "the run's log: " in line
    log = Path(line.rsplit("the run's log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "SpecError" in log.read_text()  # what the terminal did not show
    _no_crash_logs(tmp_path)
    assert not (tmp_path / "store.duckdb").exists() and not (tmp_path / "report").exists()


def _refusing(_body: Any) -> Canned:
    return Canned.error(401, message="Incorrect API key provided: sk-...")


def test_a_judge_endpoint_refusing_the_key_fails_its_stage_alone(tmp_path: Path, env: dict[str, str],
                                                                   traces: Path) -> None:
    with FakeOpenAI(_refusing) as server:
        spec = write_spec(tmp_path, ["gpt-oss-20b"], traces=traces, limit=1,
                          judge={"name": "openai-compatible", "model": "judge-model", "base_url": server.url + "/v1",
                                 "enabled": True})
        p = _run(spec, {**env, "LEGIVAL_OPENAI_API_KEY": "sk-test-refused-0123456789"})
        calls = len(server.completion_calls())
    line = assert_one_line(p, "1 stage(s) failed: judge: ")
    assert "401" in line and "sk-test-refused" not in p.stderr + p.stdout
    assert calls >= 1
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(summary["failed_stages"]) == {"judge"} and summary["not_run_stages"] == {}
    assert summary["rollouts_generated"] > 0 and summary["report_files"] > 0  # the rest ran and the report too
    assert summary["step_events"]["pairs"] > 0  # the step events ran on the lexical flags (partial inputs)
    _no_crash_logs(tmp_path)
    with (tmp_path / "report" / "coverage.csv").open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "backtracking"]
    assert rows and all("the judge stage failed: " in r["detail"] and "401" in r["detail"] for r in rows), rows

    # the key fixed: the judge judges every trace (none was stored as failed) and the failure is forgotten
    cfg = yaml.safe_load(spec.read_text())
    with FakeOpenAI() as good:
        cfg["judge"]["base_url"] = good.url + "/v1"
        spec.write_text(yaml.safe_dump(cfg))
        again = _run(spec, env)
    assert again.returncode == 0, again.stderr[-3000:]
    fixed = json.loads(again.stdout.strip().splitlines()[-1])
    assert fixed["judge_calls"] == summary["new_traces"] and "failed_stages" not in fixed
    assert fixed["step_events"]["pairs"] == summary["step_events"]["pairs"]  # replanned: the judge's flags came
    with (tmp_path / "report" / "coverage.csv").open(encoding="utf-8") as f:
        assert not [r for r in csv.DictReader(f) if "judge stage failed" in r["detail"]]
