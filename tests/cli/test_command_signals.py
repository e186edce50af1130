"""The long commands other than `legival run` end every child on a cancel too (issue 39 item 4).

Each command runs as a user runs it (its own session, output through pipes: tests/flows/_lifecycle.py),
is held mid-work (the scripted engine's gate, tests/plugins/held.py, a judge endpoint that never
answers) and signalled: it exits within 15 s with one line (`error: interrupted (SIGNAL)...`, or the
run-like `cancelled (...)` of `legival calibrate`), its pipes reach end-of-file, and nothing of its
session or process group runs 5 s later. (`legival serve`: tests/core/reports/render/test_serve_guard.py;
`legival run`: tests/flows/test_process_lifecycle.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests._cli import entry_point
from tests.conftest import FIXTURES, REPO
from tests.fakes import Canned
from tests.fakes.openai_server import FakeOpenAI
from tests.flows._lifecycle import assert_ended_cleanly, send, start, wait_for
from tests.flows._orchestration import small_traces, write_spec

pytestmark = pytest.mark.slow

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"


def _env(**extra: str) -> dict[str, str]:
    plugins = ",".join(p for p in [os.environ.get("LEGIVAL_PLUGINS", ""), "tests.plugins.scripted",
                                   "tests.plugins.held"] if p)
    return {**os.environ, "LEGIVAL_PLUGINS": plugins, "PYTHONPATH": str(REPO), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            **extra}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real traces, ingested and segmented."""
    folder = tmp_path_factory.mktemp("signals")
    traces = small_traces(folder / "t.jsonl", problems=2)
    db = folder / "template.duckdb"
    assert entry_point("ingest", traces, "--db", db, env=_env(), cwd=REPO, timeout=300).returncode == 0
    assert entry_point("efficiency", "--db", db, env=_env(), cwd=REPO, timeout=300).returncode == 0
    return db


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "s.duckdb"
    shutil.copy(template, dst)
    return dst


def _interrupted(args: list[str], env: dict[str, str], reached: Any, sig: signal.Signals, expect: str) -> None:
    w = start(args, env)
    wait_for(reached, w, 300, "the command held mid-work")
    sent = send(w, sig)
    w.wait(60)
    assert time.monotonic() - sent < 15, time.monotonic() - sent
    assert_ended_cleanly(w, 128 + sig)
    assert expect.format(sig=sig.name) in w.stderr, w.stderr[-3000:]


def test_transfer(db: Path, tmp_path: Path) -> None:
    mark, gate = tmp_path / "held", tmp_path / "gate"
    opts = json.dumps({"hold_after": 1, "gate": str(gate), "hold_mark": str(mark)})
    _interrupted(["transfer", "--db", str(db), "--student", "scripted", "--backend", "scripted-demo", "--model",
                  "scripted-demo-v1", "--max-new-tokens", "8", "--traces-per-chunk", "1", "--backend-options", opts],
                 _env(), mark.exists, signal.SIGTERM, "error: interrupted ({sig})")


def test_quality(db: Path, tmp_path: Path) -> None:
    mark = tmp_path / "held"
    _interrupted(["quality", "--db", str(db), "--metrics", "held_quality"],
                 _env(LEGIVAL_TEST_HOLD="quality", LEGIVAL_TEST_HOLD_MARK=str(mark)), mark.exists, signal.SIGHUP,
                 "error: interrupted ({sig})")


def test_judge_waiting_on_an_endpoint_that_does_not_answer(db: Path) -> None:
    with FakeOpenAI(lambda _body: Canned.json({}), delay_s=120) as server:
        _interrupted(["judge", "--db", str(db), "--judge", "openai-compatible", "--model", "m", "--base-url",
                      server.url + "/v1", "--concurrency", "2"], _env(LEGIVAL_OPENAI_API_KEY="k"),
                     lambda: len(server.requests) >= 2, signal.SIGINT, "error: interrupted")


def test_generate(tmp_path: Path) -> None:
    mark, gate = tmp_path / "held", tmp_path / "gate"
    opts = json.dumps({"hold_after": 1, "gate": str(gate), "hold_mark": str(mark)})
    _interrupted(["generate", "--db", str(tmp_path / "g.duckdb"), "--teacher", "gen", "--dataset", "gsm8k",
                  "--problems", str(GSM8K), "--backend", "scripted-demo", "--model", "scripted-demo", "--limit", "4",
                  "--batch-size", "1", "--max-new-tokens", "16", "--backend-options", opts],
                 _env(), mark.exists, signal.SIGTERM, "error: interrupted ({sig})")


def test_calibrate(tmp_path: Path, prefect_api: str) -> None:
    mark, gate = tmp_path / "held", tmp_path / "gate"
    spec = write_spec(tmp_path, ["gpt-oss-20b"], limit=2,
                      backend_options={"hold_after": 1, "gate": str(gate), "hold_mark": str(mark)})
    _interrupted(["calibrate", str(spec)], _env(PREFECT_API_URL=prefect_api), mark.exists, signal.SIGTERM,
                 "cancelled ({sig}")
