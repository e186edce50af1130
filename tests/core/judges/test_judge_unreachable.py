"""A judge whose calls fail: fail fast on an endpoint that cannot be reached (one short retry, then the
run's circuit breaker holds the remaining traces back), and `legival judge` says why and exits 2 when
nothing succeeded (a warning and exit 0 when only some calls failed). Real local servers, a really
closed port, the real `legival` entry point."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from legival_core.judges import GeminiJudge, JudgeLimits, JudgeRequest, OpenAICompatJudge
from legival_core.judges.base import Reply, Turn
from legival_core.llm.errors import ConnectionFailed
from legival_core.stages.base import run_stage
from legival_core.stages.efficiency import SegmentStage
from legival_core.stages.ingest import ingest_file
from legival_core.stages.judge import judge_missing
from legival_core.store import Store
from tests._cli import Ran
from tests._cli import legival as run_legival
from tests._sql import rows as q
from tests.conftest import EXAMPLES
from tests.fakes import Canned
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.openai_server import FakeOpenAI

KEY = "AIzaSy-LEGIVAL-unreachable-test-key-4c1d"
OPENAI_KEY = "sk-legival-unreachable-test-key-9e7a"
STEPS = ("Let x = 1.", "Wait, x must be 2.", "So the answer is 2.")
ENV_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "LEGIVAL_GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
            "LEGIVAL_OPENAI_BASE_URL", "LEGIVAL_OPENAI_API_KEY", "OPENAI_API_KEY")


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reqs(n: int) -> list[JudgeRequest]:
    return [JudgeRequest(f"t{i}", "math", "What is x?", STEPS) for i in range(n)]


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    e.update(extra)
    return e


def legival(*args: str, environ: dict[str, str]) -> tuple[Ran, float]:
    t0 = time.monotonic()
    p = run_legival(*args, env=environ)
    return p, time.monotonic() - t0


def last_json(p: Ran) -> dict[str, Any]:
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The bundled store (80 traces, 5 teachers), already segmented so a judge run only judges."""
    path = tmp_path / "j.duckdb"
    with Store(path) as s:
        ingest_file(s, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
        run_stage(SegmentStage(), s)
    return path


def stored(db: Path) -> dict[str, tuple[str, str]]:
    with Store(db) as s:
        return {t: (st, r) for t, st, r in q(s, "SELECT trace_id, status, reason FROM judge_results")}


# ------------------------------------------------------------------------------------ the judges


@pytest.mark.parametrize("kind", ["gemini", "openai-compatible"])
def test_a_closed_port_fails_fast_and_the_rest_is_not_sent(kind: str) -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    lim = JudgeLimits(concurrency=8)  # the default retries: 6 with backoff, 1 for a connection
    j = (GeminiJudge(api_key=KEY, base_url=url, limits=lim) if kind == "gemini"
         else OpenAICompatJudge(model="m", api_key=OPENAI_KEY, base_url=f"{url}/v1", limits=lim))
    seen: list[int] = []
    breaker = j.new_breaker()
    t0 = time.monotonic()
    res = j.judge_many(reqs(10), progress=seen.append, breaker=breaker)
    assert time.monotonic() - t0 < 3
    assert len(res) == 2  # the probe: two traces tried, whichever threads got there first
    for r in res:
        assert r.status == "failed" and r.retries == 1 and r.windows == 1
        assert r.reason == f"cannot connect to {url}: connection refused"
    assert breaker.is_open and breaker.not_sent == 8 and seen[-1] == 10
    assert j.judge_many(reqs(3), breaker=breaker) == [] and breaker.not_sent == 11  # the run stays stopped
    (one,) = j.judge_many(reqs(1))  # a new run (a new breaker) tries again
    assert one.status == "failed" and "connection refused" in one.reason


class FlakyConnect(GeminiJudge):
    """Refuses the first `refusals` connections, then talks to the server."""

    refusals = 1

    def _send(self, system: str, turns: Sequence[Turn]) -> Reply:
        if self.refusals:
            self.refusals -= 1
            raise ConnectionFailed("cannot connect to http://x: connection refused")
        return super()._send(system, turns)


def test_one_short_retry_on_a_connection_error_then_the_reply_counts() -> None:
    with FakeGemini() as srv:
        j = FlakyConnect(api_key=KEY, base_url=srv.url, limits=JudgeLimits(connect_retry_delay_s=0.01))
        r = j.judge(reqs(1)[0])
        assert r.status == "ok" and r.flagged_steps == (2,) and r.retries == 1 and len(srv.requests) == 1
        j.refusals = 2
        r = j.judge(reqs(1)[0])
        assert r.status == "failed" and r.retries == 1 and r.reason.startswith("cannot connect to")


def test_server_errors_keep_their_retries_and_never_open_the_breaker() -> None:
    with FakeGemini(responder=lambda _body: Canned.error(503)) as srv:
        lim = JudgeLimits(concurrency=4, max_retries=2, backoff_base_s=0.001, backoff_cap_s=0.01)
        res = GeminiJudge(api_key=KEY, base_url=srv.url, limits=lim).judge_many(reqs(6))
        assert len(res) == 6 and len(srv.requests) == 18  # every trace tried, 1 + 2 retries each
        assert all(r.status == "failed" and r.retries == 2 and "gave up after 2 retries" in r.reason for r in res)


def test_the_stage_stores_nothing_when_the_endpoint_cannot_be_reached(db: Path) -> None:
    """Transient failures stay to do (docs/judge.md): the traces tried and the traces not sent alike."""
    dead = GeminiJudge(api_key=KEY, base_url=f"http://127.0.0.1:{closed_port()}",
                       limits=JudgeLimits(concurrency=4, connect_retry_delay_s=0.01))
    with Store(db) as s:
        first = judge_missing(s, dead, limit=2, chunk_size=4)  # 10 traces in chunks of 4: one breaker
        assert (first.judge_calls, first.failed, first.ok, first.not_sent) == (2, 2, 0, 8)
        assert first.every_call_failed and "connection refused" in first.first_failure
        assert first.failure_note().endswith("(2 traces tried, 8 not sent, 10 stay to do)")
        assert first.deferred == 2
    assert stored(db) == {}
    with FakeGemini() as srv, Store(db) as s:
        again = judge_missing(s, GeminiJudge(api_key=KEY, base_url=srv.url), limit=2)
        assert (again.cached, again.todo, again.ok, again.not_sent) == (0, 10, 10, 0)  # all 10 stayed to do
        assert not again.every_call_failed and again.failure_note() == ""


# ---------------------------------------------------------------------------------- legival judge


def test_cli_gemini_against_a_closed_port_exits_2_fast_and_says_why(db: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    p, wall = legival("judge", "--db", str(db), "--limit", "2",
                      environ=env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=url))
    assert p.returncode == 2, p.stderr
    assert wall < 10, wall
    assert (f"error: judge gemini: every call failed: cannot connect to {url}: connection refused "
            "(2 traces tried, 8 not sent, 10 stay to do)") in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    s = last_json(p)  # the summary stays the last line of stdout
    assert (s["ok"], s["failed"], s["judge_calls"], s["not_sent"], s["todo"]) == (0, 2, 2, 8, 10)
    assert s["wall_s"] < 5
    assert stored(db) == {}  # nothing stored: every trace stays to do
    assert KEY not in p.stdout + p.stderr


def test_cli_openai_compatible_against_a_closed_port_exits_2(db: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    p, wall = legival("judge", "--db", str(db), "--judge", "openai-compatible", "--model", "m",
                      "--base-url", f"{url}/v1", "--limit", "1", environ=env(LEGIVAL_OPENAI_API_KEY=OPENAI_KEY))
    assert p.returncode == 2 and wall < 10 and "Traceback" not in p.stderr
    assert (f"error: judge openai-compatible: every call failed: cannot connect to {url}: connection refused "
            "(2 traces tried, 3 not sent, 5 stay to do)") in p.stderr
    assert (last_json(p)["failed"], last_json(p)["not_sent"]) == (2, 3) and stored(db) == {}
    assert OPENAI_KEY not in p.stdout + p.stderr


def test_cli_every_call_rejected_exits_2_with_the_scrubbed_reason(db: Path) -> None:
    with FakeGemini(responder=lambda _body: Canned.error(401, message="invalid"), echo_key_in_errors=True) as srv:
        p, _ = legival("judge", "--db", str(db), "--limit", "1",
                       environ=env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=srv.url))
        assert len(srv.generate_calls()) == 5  # the server answered: no breaker, every trace tried once
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert "every call failed: Gemini API error 401" in line and "[REDACTED]" in line
    assert line.endswith("(5 traces tried, 5 stay to do)")  # a refused key is not the traces' failure
    assert last_json(p)["failed"] == 5 and stored(db) == {}
    assert KEY not in p.stdout + p.stderr and KEY.encode() not in db.read_bytes()


def test_cli_some_calls_failed_is_a_warning_and_exit_0(db: Path) -> None:
    with FakeGemini(echo_key_in_errors=True) as srv:
        srv.script.append(Canned.error(403, message="forbidden"))
        p, _ = legival("judge", "--db", str(db), "--limit", "1", "--concurrency", "1",
                       environ=env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=srv.url))
    assert p.returncode == 0, p.stderr
    assert "error:" not in p.stderr and "Traceback" not in p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
    assert line.startswith("warning: judge gemini: 1 of 5 traces failed, 1 stay to do; first reason: Gemini API error 403")
    assert "[REDACTED]" in line and KEY not in p.stdout + p.stderr
    s = last_json(p)
    assert (s["ok"], s["failed"], s["not_sent"], s["deferred"]) == (4, 1, 0, 1)
    assert sorted(st for st, _ in stored(db).values()) == ["ok"] * 4  # the refused one stays to do


def test_cli_openai_compatible_some_calls_failed_is_a_warning(db: Path) -> None:
    with FakeOpenAI() as srv:
        srv.script.append(Canned.error(400, message=f"bad request from Bearer {OPENAI_KEY}"))
        p, _ = legival("judge", "--db", str(db), "--judge", "openai-compatible", "--model", "m", "--base-url",
                       srv.url, "--limit", "1", "--concurrency", "1", environ=env(LEGIVAL_OPENAI_API_KEY=OPENAI_KEY))
    assert p.returncode == 0, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
    assert line.startswith("warning: judge openai-compatible: 1 of 5 traces failed; first reason: HTTP 400")
    assert "[REDACTED]" in line and OPENAI_KEY not in p.stdout + p.stderr
    assert (last_json(p)["ok"], last_json(p)["failed"]) == (4, 1)
    assert sorted(st for st, _ in stored(db).values()) == ["failed"] + ["ok"] * 4  # a request refused: stored
