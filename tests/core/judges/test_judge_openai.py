"""The openai-compatible judge against a local chat-completions server (real HTTP, no patching)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from legival_core.datasets.gpqa import JUDGE_RUBRIC
from legival_core.judges import GeminiJudge, JudgeError, JudgeLimits, JudgeRequest, OpenAICompatJudge
from legival_core.judges.base import BaseJudge
from legival_core.judges.prompt import RESPONSE_JSON_SCHEMA, rubric_prompt
from legival_core.registry import get
from tests.fakes import Canned, judgement
from tests.fakes.openai_server import FakeOpenAI

SYSTEM_GPQA = rubric_prompt(JUDGE_RUBRIC)
KEY = "sk-fake-legival-0123456789abcdef"
FAST = JudgeLimits(concurrency=4, backoff_base_s=0.001, backoff_cap_s=0.01, timeout_s=10)
STEPS = ("Option A looks right.", "Wait, A ignores the spin.", "So the answer is C.")


def req(tid: str = "t1") -> JudgeRequest:
    return JudgeRequest(tid, "gpqa", "Which option?", STEPS)


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s


def judge(srv: FakeOpenAI, **kw: object) -> OpenAICompatJudge:
    kw.setdefault("limits", FAST)
    return OpenAICompatJudge(model="judge-model", base_url=srv.url + "/v1", api_key=KEY, **kw)  # type: ignore[arg-type]


def test_protocol_and_valid_reply(srv: FakeOpenAI) -> None:
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.flagged_steps == (2,) and (r.input_tokens, r.output_tokens) == (100, 20)
    (call,) = srv.requests
    assert call.path == "/v1/chat/completions" and call.headers["authorization"] == f"Bearer {KEY}"
    b = call.body
    assert b["model"] == "judge-model" and b["temperature"] == 0.1
    assert [m["role"] for m in b["messages"]] == ["system", "user"]
    assert b["messages"][0]["content"] == SYSTEM_GPQA
    assert "[2] Wait, A ignores the spin." in b["messages"][1]["content"]
    rf = b["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == RESPONSE_JSON_SCHEMA


def test_retry_after_and_5xx_are_retried_and_counted(srv: FakeOpenAI) -> None:
    srv.script.extend([Canned.error(429, retry_after="0"), Canned.error(502), Canned.json(judgement([2]))])
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.retries == 2 and len(srv.requests) == 3


def test_repair_then_failed(srv: FakeOpenAI) -> None:
    srv.script.extend([Canned(text='```json\n{"backtracking_detected": true}\n```'), Canned(text="nope")])
    r = judge(srv).judge(req())
    assert r.status == "failed" and r.repaired and "missing keys" in r.reason and len(srv.requests) == 2
    msgs = srv.requests[1].body["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert "You are a JSON repair tool." in msgs[3]["content"] and "missing keys" in msgs[3]["content"]


def test_fenced_json_is_accepted_and_out_of_range_dropped(srv: FakeOpenAI) -> None:
    import json

    srv.script.append(Canned(text="Here:\n```json\n" + json.dumps(judgement([2, 4, -1])) + "\n```"))
    r = judge(srv).judge(req())
    assert r.status == "ok" and not r.repaired and r.flagged_steps == (2,) and r.dropped_out_of_range == 2


def test_non_json_http_body_is_transient(srv: FakeOpenAI) -> None:
    srv.script.extend([Canned(raw_body=b"<html>gateway</html>"), Canned.json(judgement([]))])
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.retries == 1


def test_key_is_scrubbed(srv: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    srv.script.extend(
        [Canned.error(500, message=f"bad token Bearer {KEY}"), Canned.error(401, message=f"key={KEY}")]
    )
    j = judge(srv)
    r = j.judge(req())
    assert r.status == "failed" and r.retries == 1
    for t in (repr(r), repr(j), str(vars(j)), caplog.text):
        assert KEY not in t


def test_missing_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEGIVAL_OPENAI_BASE_URL", raising=False)
    with pytest.raises(JudgeError, match="LEGIVAL_OPENAI_BASE_URL"):
        OpenAICompatJudge(model="m")


def test_no_key_sends_no_authorization(srv: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LEGIVAL_OPENAI_API_KEY", raising=False)
    OpenAICompatJudge(model="m", base_url=srv.url, limits=FAST).judge(req())
    assert "authorization" not in srv.requests[0].headers


def test_concurrency(srv: FakeOpenAI) -> None:
    srv.delay_s = 0.05
    j = judge(srv, limits=JudgeLimits(concurrency=16))
    t0 = time.monotonic()
    res = j.judge_many([req(f"t{i}") for i in range(200)])
    assert time.monotonic() - t0 < 0.5 * 200 * 0.05
    assert all(r.status == "ok" for r in res)


def test_shared_loop_and_registration() -> None:
    assert get("judge", "openai-compatible") is OpenAICompatJudge
    for cls in (GeminiJudge, OpenAICompatJudge):
        assert issubclass(cls, BaseJudge)
        # the retry/repair/windowing loop lives only in BaseJudge
        for name in ("_call_with_retries", "_settle", "_judge_one", "judge_many"):
            assert name not in cls.__dict__
