"""The gemini judge against a local server speaking the real Gemini REST protocol (no client patching)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator

import pytest

from legival_core.datasets.math import JUDGE_RUBRIC
from legival_core.judges import (
    GeminiJudge,
    JudgeError,
    JudgeLimits,
    JudgeRequest,
    MissingAPIKey,
    WindowPolicy,
    backtracking_fraction,
    estimate_cost,
)
from legival_core.judges.base import BaseJudge
from legival_core.judges.prompt import rubric_prompt, system_prompt, user_prompt
from legival_core.llm.cost import CostLimitExceeded
from legival_core.registry import get
from tests.fakes import Canned, judgement
from tests.fakes.gemini_server import FakeGemini, last_user_text

SYSTEM_MATH = rubric_prompt(JUDGE_RUBRIC)
KEY = "AIzaFAKE-legival-test-key-0123456789"
FAST = JudgeLimits(concurrency=4, backoff_base_s=0.001, backoff_cap_s=0.01, timeout_s=10)
STEPS = ("Let x = 1.", "Wait, x must be 2.", "So the answer is 2.")


def req(tid: str = "t1", steps: tuple[str, ...] = STEPS, dataset: str = "math") -> JudgeRequest:
    return JudgeRequest(tid, dataset, "What is x?", steps)


@pytest.fixture
def srv() -> Iterator[FakeGemini]:
    with FakeGemini() as s:
        yield s


def judge(srv: FakeGemini, **kw: object) -> GeminiJudge:
    kw.setdefault("limits", FAST)
    return GeminiJudge(api_key=KEY, base_url=srv.url, **kw)  # type: ignore[arg-type]


def test_valid_reply_speaks_the_gemini_protocol(srv: FakeGemini) -> None:
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.flagged_steps == (2,) and r.backtracking_detected is True
    assert r.final_answer == "42" and r.confidence == 0.9 and r.retries == 0 and not r.repaired
    assert (r.input_tokens, r.output_tokens) == (100, 20)
    assert '"step_number": 2' in r.raw_json
    assert backtracking_fraction(r, 3) == pytest.approx(1 / 3)
    (call,) = srv.requests
    assert call.method == "POST" and call.path == "/v1/models/gemini-2.5-flash:generateContent"
    assert call.headers["x-goog-api-key"] == KEY
    body = call.body
    assert body["systemInstruction"]["parts"][0]["text"] == SYSTEM_MATH
    gc = body["generationConfig"]
    assert gc["temperature"] == 0.1 and gc["responseMimeType"] == "application/json"
    assert set(gc["responseSchema"]["required"]) == {
        "backtracking_detected",
        "final_answer",
        "backtracking_steps",
        "confidence",
        "overall_reasoning",
    }
    text = last_user_text(body)
    assert (
        "--- TRACE START ---\n[1] Let x = 1.\n[2] Wait, x must be 2.\n[3] So the answer is 2.\n--- TRACE END ---"
        in text
    )
    assert "What is x?" not in text  # the paper sends the trace only (include_question=False)


def test_429_with_retry_after_is_honoured_and_counted(srv: FakeGemini) -> None:
    srv.script.extend([Canned.error(429, retry_after="1"), Canned.json(judgement([2]))])
    t0 = time.monotonic()
    r = judge(srv).judge(req())
    assert time.monotonic() - t0 >= 0.95
    assert r.status == "ok" and r.retries == 1 and len(srv.requests) == 2


def test_5xx_backoff_then_success(srv: FakeGemini) -> None:
    srv.script.extend([Canned.error(500), Canned.error(503), Canned.json(judgement([]))])
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.retries == 2 and r.flagged_steps == () and len(srv.requests) == 3
    assert backtracking_fraction(r, 3) == 0.0


def test_gives_up_after_max_retries_as_failed_not_zero(srv: FakeGemini) -> None:
    srv.script.extend([Canned.error(500)] * 3)
    lim = JudgeLimits(max_retries=2, backoff_base_s=0.001, backoff_cap_s=0.01)
    r = judge(srv, limits=lim).judge(req())
    assert r.status == "failed" and r.retries == 2 and len(srv.requests) == 3
    assert "gave up after 2 retries" in r.reason and "500" in r.reason
    assert backtracking_fraction(r, 3) is None and r.flagged_steps == ()


def test_400_is_not_retried(srv: FakeGemini) -> None:
    srv.script.append(Canned.error(400, message="bad request"))
    r = judge(srv).judge(req())
    assert r.status == "failed" and r.retries == 0 and len(srv.requests) == 1 and "400" in r.reason


def test_timeout_is_retried(srv: FakeGemini) -> None:
    srv.delay_s = 0.5
    lim = JudgeLimits(max_retries=1, backoff_base_s=0.001, backoff_cap_s=0.01, timeout_s=0.1)
    r = judge(srv, limits=lim).judge(req())
    assert r.status == "failed" and r.retries == 1 and "timeout" in r.reason.lower()


def test_malformed_reply_is_repaired_once(srv: FakeGemini) -> None:
    srv.script.extend([Canned(text='{"backtracking_detected": tru'), Canned.json(judgement([2]))])
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.repaired and r.flagged_steps == (2,) and len(srv.requests) == 2
    assert (r.input_tokens, r.output_tokens) == (200, 40)  # both calls are counted
    turns = srv.requests[1].body["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user"]
    assert turns[1]["parts"][0]["text"] == '{"backtracking_detected": tru'
    repair = turns[2]["parts"][0]["text"]
    assert "You are a JSON repair tool." in repair and '{"backtracking_detected": tru' in repair
    assert '"step_number": integer' in repair and "not valid JSON" in repair


def test_malformed_twice_is_failed_never_zero(srv: FakeGemini) -> None:
    srv.script.extend([Canned(text="I think there is no backtracking."), Canned(text="still not json")])
    r = judge(srv).judge(req())
    assert r.status == "failed" and r.repaired and len(srv.requests) == 2
    assert "after one repair" in r.reason and r.raw_json == "still not json"
    assert backtracking_fraction(r, 3) is None


@pytest.mark.parametrize(
    "bad",
    [
        {**judgement([2]), "confidence": 1.5},
        {**judgement([2]), "backtracking_steps": [{"step_number": "2", "reason": "x"}]},
        {**judgement([]), "backtracking_steps": [{"step_number": 2, "reason": "x"}]},
        {k: v for k, v in judgement([2]).items() if k != "final_answer"},
    ],
)
def test_schema_violation_is_re_asked(srv: FakeGemini, bad: dict[str, object]) -> None:
    srv.script.extend([Canned.json(bad), Canned.json(judgement([2]))])
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.repaired and len(srv.requests) == 2


def test_out_of_range_steps_are_dropped_and_counted(srv: FakeGemini) -> None:
    srv.script.append(Canned.json(judgement([0, 2, 3, 7, 7, 3])))
    r = judge(srv).judge(req())
    assert r.status == "ok" and r.flagged_steps == (2, 3) and r.dropped_out_of_range == 2
    assert backtracking_fraction(r, 3) == pytest.approx(2 / 3)


def test_empty_trace_is_not_sent(srv: FakeGemini) -> None:
    r = judge(srv).judge(req(steps=()))
    assert r.status == "ok" and not srv.requests and backtracking_fraction(r, 0) is None


def long_request() -> JudgeRequest:
    steps = tuple(
        ("Wait, " if k in (5, 25, 38) else "") + f"Step {k} computes a partial sum of the series carefully."
        for k in range(1, 41)
    )
    return req("long", steps)


def tight_policy(split: bool) -> WindowPolicy:
    return WindowPolicy(max_prompt_tokens=math.ceil(len(SYSTEM_MATH) / 4) + 300, split=split)


def test_overflow_when_splitting_is_disabled(srv: FakeGemini) -> None:
    r = judge(srv, windows=tight_policy(split=False)).judge(long_request())
    assert r.status == "overflow" and "splitting disabled" in r.reason and not srv.requests
    assert backtracking_fraction(r, 40) is None


def test_long_trace_is_split_into_windows_with_original_numbering(srv: FakeGemini) -> None:
    policy = tight_policy(split=True)
    r = judge(srv, windows=policy).judge(long_request())
    assert r.status == "ok" and r.windows == len(srv.requests) >= 2
    assert r.flagged_steps == (5, 25, 38)
    seen: list[int] = []
    for call in srv.requests:
        text = last_user_text(call.body)
        nums = [int(line[1:].split("]")[0]) for line in text.splitlines() if line.startswith("[")]
        assert nums == list(range(nums[0], nums[0] + len(nums)))
        assert f"steps {nums[0]} to {nums[-1]} of a trace with 40 steps" in text
        est = math.ceil((len(SYSTEM_MATH) + len(text)) / policy.chars_per_token)
        assert est <= policy.max_prompt_tokens
        seen += nums
    assert seen == list(range(1, 41))  # every step judged exactly once, in order


def test_missing_key_names_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(MissingAPIKey, match="GEMINI_API_KEY.*GOOGLE_API_KEY"):
        GeminiJudge(base_url="http://127.0.0.1:9")


def test_key_and_endpoint_from_the_environment(srv: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "env-google-key")
    monkeypatch.setenv("LEGIVAL_GEMINI_BASE_URL", srv.url)
    assert GeminiJudge(limits=FAST).judge(req()).status == "ok"
    assert srv.requests[-1].headers["x-goog-api-key"] == "env-google-key"
    monkeypatch.setenv("GEMINI_API_KEY", "env-gemini-key")
    GeminiJudge(limits=FAST).judge(req())
    assert srv.requests[-1].headers["x-goog-api-key"] == "env-gemini-key"


def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeGemini(echo_key_in_errors=True) as s:
        s.script.extend([Canned.error(500), Canned.error(403, message="forbidden")])
        j = judge(s)
        r = j.judge(req())
        assert r.status == "failed" and r.retries == 1 and "[REDACTED]" in r.reason
        with pytest.raises(JudgeError) as ei:
            j.poll_batch("batches/nope")
        texts = [repr(r), str(r), str(ei.value), repr(ei.value), repr(j), str(vars(j)), caplog.text]
    out = capsys.readouterr()
    texts += [out.out, out.err]
    assert s.requests[0].headers["x-goog-api-key"] == KEY  # the key was really sent ...
    assert "rejected" in str(ei.value)  # ... and really echoed back by the server
    for t in texts:
        assert KEY not in t


def test_concurrency_beats_serial(srv: FakeGemini) -> None:
    srv.delay_s = 0.05
    reqs = [req(f"t{i}") for i in range(200)]
    j = judge(srv, limits=JudgeLimits(concurrency=16, timeout_s=10))
    t0 = time.monotonic()
    res = j.judge_many(reqs)
    elapsed = time.monotonic() - t0
    assert [r.trace_id for r in res] == [f"t{i}" for i in range(200)]
    assert all(r.status == "ok" and r.flagged_steps == (2,) for r in res)
    assert elapsed < 0.5 * 200 * 0.05, elapsed


def test_requests_per_minute_limit(srv: FakeGemini) -> None:
    j = judge(srv, limits=JudgeLimits(concurrency=8, rpm=1200))  # one call per 50 ms
    t0 = time.monotonic()
    j.judge_many([req(f"t{i}") for i in range(11)])
    assert time.monotonic() - t0 >= 0.45


def test_progress_reports_each_finished_request(srv: FakeGemini) -> None:
    seen: list[int] = []
    judge(srv).judge_many([req(f"t{i}") for i in range(7)], progress=seen.append)
    assert seen == list(range(1, 8))


def test_cache_key_params_exclude_operational_fields(srv: FakeGemini) -> None:
    a = judge(srv).cache_key_params()
    b = GeminiJudge(
        api_key="other", base_url=srv.url, limits=JudgeLimits(concurrency=99, timeout_s=1)
    ).cache_key_params()
    assert a == b
    assert a["judge"] == "gemini" and a["model"] == "gemini-2.5-flash" and a["temperature"] == 0.1
    assert "prompt_version" in a and not any("key" in k or "timeout" in k or "concurren" in k for k in a)
    assert judge(srv, temperature=0.0).cache_key_params() != a


def test_registered_and_a_judge() -> None:
    from legival_core.judges import Judge

    assert get("judge", "gemini") is GeminiJudge
    assert issubclass(GeminiJudge, BaseJudge)
    assert isinstance(GeminiJudge(api_key=KEY, base_url="http://127.0.0.1:9"), Judge)


def test_unknown_dataset_fails_before_any_call(srv: FakeGemini) -> None:
    with pytest.raises(ValueError, match="no backtracking rubric"):
        judge(srv).judge_many([req(dataset="nope")])
    assert not srv.requests


def test_cost_estimate_and_guard(srv: FakeGemini) -> None:
    r = req()
    chars = len(system_prompt("math")) + len(user_prompt(r.steps, m=3))
    est = estimate_cost([r, req(steps=())])
    assert est.calls == 1
    assert est.input_tokens == round(chars / 4 * 1.1)
    assert est.output_tokens == round(2048 * 1.1)
    assert est.usd == pytest.approx((est.input_tokens * 0.30 + est.output_tokens * 2.50) / 1e6)
    assert estimate_cost([r], batch=True).usd == pytest.approx(est.usd / 2)
    with pytest.raises(CostLimitExceeded, match="exceeds max_cost_usd"):
        judge(srv, max_cost_usd=1e-6).judge_many([r])
    with pytest.raises(CostLimitExceeded):
        judge(srv, max_cost_usd=1e-6).submit_batch([r])
    assert not srv.requests
    assert judge(srv, max_cost_usd=1.0).judge(r).status == "ok"


def test_batch_submit_poll_collect(srv: FakeGemini) -> None:
    srv.batch_pending_polls = 2
    reqs = [req("a"), req("b", ("Fine.", "Done.")), req("empty", ())]
    j = judge(srv)
    name = j.submit_batch(reqs)
    assert name == "batches/job1"
    create = srv.requests[0]
    assert create.path == "/v1/models/gemini-2.5-flash:batchGenerateContent"
    assert create.headers["x-goog-api-key"] == KEY
    items = create.body["batch"]["inputConfig"]["requests"]["requests"]
    assert [i["metadata"]["trace_id"] for i in items] == ["a", "b"]  # the empty trace is not sent
    assert items[0]["request"]["systemInstruction"]["parts"][0]["text"] == SYSTEM_MATH
    assert items[0]["request"]["generationConfig"]["responseMimeType"] == "application/json"
    st = j.poll_batch(name)
    assert (st.state, st.done) == ("JOB_STATE_RUNNING", False)
    with pytest.raises(JudgeError, match="not JOB_STATE_SUCCEEDED"):
        j.collect_batch(name)  # second poll flips it to succeeded for the next call
    res = j.collect_batch(name, reqs)
    assert [(r.trace_id, r.status, r.flagged_steps) for r in res] == [
        ("a", "ok", (2,)),
        ("b", "ok", ()),
        ("empty", "ok", ()),
    ]
    assert res[0].input_tokens == 100


def test_batch_invalid_item_is_repaired_online_only_with_requests(srv: FakeGemini) -> None:
    srv.batch_pending_polls = 0
    reqs = [req("a"), req("b")]
    j = judge(srv)
    srv.script.extend([Canned(text="not json"), Canned.error(500, message="item failed")])
    name = j.submit_batch(reqs)
    alone = j.collect_batch(name)
    assert [(r.trace_id, r.status) for r in alone] == [("a", "failed"), ("b", "failed")]
    assert "no repair possible" in alone[0].reason and "item failed" in alone[1].reason
    n_before = len(srv.requests)
    with_reqs = j.collect_batch(name, reqs)
    assert with_reqs[0].status == "ok" and with_reqs[0].repaired and with_reqs[0].flagged_steps == (2,)
    assert with_reqs[1].status == "failed"
    repair_calls = srv.generate_calls()
    assert len(srv.requests) - n_before == 2 and len(repair_calls) == 1  # one GET, one online repair
    assert [t["role"] for t in repair_calls[0].body["contents"]] == ["user", "model", "user"]


def test_batch_windows_are_merged(srv: FakeGemini) -> None:
    srv.batch_pending_polls = 0
    j = judge(srv, windows=tight_policy(split=True))
    name = j.submit_batch([long_request()])
    items = srv.requests[0].body["batch"]["inputConfig"]["requests"]["requests"]
    assert len(items) >= 2 and {i["metadata"]["windows"] for i in items} == {str(len(items))}
    (r,) = j.collect_batch(name)
    assert r.status == "ok" and r.flagged_steps == (5, 25, 38) and r.windows == len(items)


def test_batch_jsonl_file_submit_poll_collect(srv: FakeGemini) -> None:
    srv.batch_pending_polls = 1
    odd = "tr:ace/#7 ü"  # a trace id holding the key's separators
    reqs = [req("a"), req("c", ("Fine.", "Done.")), req(odd), req("empty", ())]
    j = judge(srv)
    srv.script.extend([Canned(text="not json"), Canned.error(500, message="item failed")])
    name = j.submit_batch(reqs, use_file=True)
    assert name == "batches/job1"
    start, *chunks, create = srv.requests
    assert start.path == "/upload/v1/files" and start.headers["x-goog-upload-command"] == "start"
    assert start.headers["x-goog-upload-protocol"] == "resumable"
    assert chunks and "finalize" in chunks[-1].headers["x-goog-upload-command"]
    assert create.path == "/v1/models/gemini-2.5-flash:batchGenerateContent"
    src = create.body["batch"]["inputConfig"]
    assert "requests" not in src and src["fileName"] == "files/f1"
    uploaded = srv.uploaded(src["fileName"])
    assert KEY.encode() not in uploaded
    lines = [json.loads(x) for x in uploaded.decode().splitlines()]
    assert [ln["key"] for ln in lines] == ["w0/1:1-3:m3:a", "w0/1:1-2:m2:c", f"w0/1:1-3:m3:{odd}"]
    assert set(lines[0]) == {"key", "request"}  # the empty trace is not sent
    body = lines[0]["request"]
    assert body["systemInstruction"]["parts"][0]["text"] == SYSTEM_MATH
    assert body["generationConfig"]["responseMimeType"] == "application/json"

    assert j.poll_batch(name).done is False
    assert j.poll_batch(name).state == "JOB_STATE_SUCCEEDED"
    assert srv.batches["job1"]["responses_file"] == "files/f2"
    alone = j.collect_batch(name)  # resume without the requests: the keys alone name the traces
    assert [(r.trace_id, r.status) for r in alone] == [("a", "failed"), ("c", "failed"), (odd, "ok")]
    assert "no repair possible" in alone[0].reason and "item failed" in alone[1].reason
    assert alone[2].flagged_steps == (2,) and alone[2].input_tokens == 100
    n_before = len(srv.generate_calls())
    res = j.collect_batch(name, reqs)
    assert [(r.trace_id, r.status, r.flagged_steps) for r in res] == [
        ("a", "ok", (2,)),
        ("c", "failed", ()),
        (odd, "ok", (2,)),
        ("empty", "ok", ()),
    ]
    assert res[0].repaired
    repairs = srv.generate_calls()[n_before:]
    assert len(repairs) == 1 and [t["role"] for t in repairs[0].body["contents"]] == ["user", "model", "user"]
    downloads = [r for r in srv.requests if r.path.endswith(":download?alt=media")]
    assert len(downloads) == 2 and downloads[0].path.endswith("/files/f2:download?alt=media")
    for f in srv.files.values():
        assert KEY.encode() not in f["data"]
    assert all(KEY not in f"{r.reason} {r.raw_json}" for r in [*alone, *res])

    # the file carries exactly the request bodies the inline path sends
    j.submit_batch(reqs)
    items = srv.requests[-1].body["batch"]["inputConfig"]["requests"]["requests"]
    assert [i["request"] for i in items] == [ln["request"] for ln in lines]


def test_batch_switches_to_a_file_over_the_threshold(srv: FakeGemini) -> None:
    srv.batch_pending_polls = 0
    j = judge(srv, batch_file_threshold_bytes=100)
    name = j.submit_batch([req("a"), req("b", ("Fine.", "Done."))])
    assert "fileName" in srv.requests[-1].body["batch"]["inputConfig"]
    res = j.collect_batch(name)
    assert [(r.trace_id, r.status, r.flagged_steps) for r in res] == [("a", "ok", (2,)), ("b", "ok", ())]
    big = judge(srv)  # default 15 MB: inline
    big.submit_batch([req("c")])
    assert "requests" in srv.requests[-1].body["batch"]["inputConfig"]
