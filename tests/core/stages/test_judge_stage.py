"""The judge stage and `legival judge` / `legival judge-agreement` end to end, against local servers
speaking the real Gemini and chat-completions protocols (the real google-genai client over HTTP)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from legival_core.judges import (
    GeminiJudge,
    JudgeLimits,
    JudgeRequest,
    JudgeResult,
)
from legival_core.judges.records import BatchStatus
from legival_core.llm.cost import CostLimitExceeded
from legival_core.stages.ingest import ingest_file
from legival_core.stages.judge import judge_key, judge_missing, select_traces
from legival_core.store import Store
from tests._cli import Ran
from tests._cli import legival as run_legival
from tests._sql import rows as q
from tests.conftest import EXAMPLES
from tests.fakes import Canned, judgement
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.openai_server import FakeOpenAI

KEY = "AIzaSy-LEGIVAL-stage-test-key-7f3e9a1c"
OPENAI_KEY = "sk-legival-stage-test-openai-key-5d2b8e"
BUNDLED = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
FAST = JudgeLimits(concurrency=4, backoff_base_s=0.001, backoff_cap_s=0.01, timeout_s=10)


def legival(*args: str, env: dict[str, str] | None = None, check: bool = True) -> Ran:
    p = run_legival(*args, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"legival {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def last_json(p: Ran) -> dict[str, Any]:
    return json.loads(p.stdout.strip().splitlines()[-1])


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "LEGIVAL_GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
                        "LEGIVAL_OPENAI_BASE_URL", "LEGIVAL_OPENAI_API_KEY", "OPENAI_API_KEY")}
    env.update(extra)
    return env


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "j.duckdb"
    with Store(path) as s:
        ingest_file(s, BUNDLED)
    return path


@pytest.fixture
def gemini() -> Iterator[FakeGemini]:
    with FakeGemini() as s:
        yield s


def rows(db: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with Store(db) as s:
        return q(s, sql, list(params))


def assert_key_nowhere(key: str, *texts: str, paths: Sequence[Path] = ()) -> None:
    for t in texts:
        assert key not in t
    for root in paths:
        files = [root] if root.is_file() else [f for f in root.rglob("*") if f.is_file()]
        assert files, root
        for f in files:
            assert key.encode() not in f.read_bytes(), f


# ------------------------------------------------------------------------------------- gemini CLI


def test_cli_judge_gemini_stores_caches_and_feeds_the_report(db: Path, gemini: FakeGemini, tmp_path: Path) -> None:
    gemini.echo_key_in_errors = True  # a server that echoes the key in errors: we must scrub it
    gemini.script.extend([
        # first trace: 429 then 503 (both Retry-After: 0), then a reply with one out-of-range step
        Canned.error(429, retry_after="0"),
        Canned.error(503, retry_after="0"),
        Canned.json(judgement([1, 999])),
        # second trace: malformed, repaired once, malformed again -> failed
        Canned(text="this is not json"),
        Canned(text="{still not json"),
        # third trace: a permanent 400 -> failed, reason scrubbed
        Canned.error(400, message="bad request"),
    ])
    env = clean_env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=gemini.url)
    # concurrency 1: the scripted replies go to the first traces of the stable order
    p1 = legival("judge", "--db", str(db), "--limit", "3", "--concurrency", "1", env=env)
    s1 = last_json(p1)
    assert (s1["selected"], s1["cached"], s1["judge_calls"]) == (15, 0, 15)  # 5 teachers x 3
    assert (s1["ok"], s1["failed"], s1["retries"], s1["dropped_out_of_range"]) == (13, 2, 2, 1)
    assert s1["estimated_cost_usd"] > 0 and s1["judge"] == "gemini"

    with Store(db) as s:
        order = [t for (t,) in q(s,
            "SELECT trace_id FROM traces QUALIFY row_number() OVER (PARTITION BY teacher, dataset "
            "ORDER BY problem_id, trace_id) <= 3 ORDER BY teacher, dataset, problem_id, trace_id")]
        stored = {r[0]: r[1:] for r in q(s,
            "SELECT trace_id, status, m, flagged_steps, fraction, reason, retries, dropped_out_of_range, "
            "judge, model FROM judge_results")}
    assert set(stored) == set(order)
    st, m, flagged, frac, _, retries, dropped, j, model = stored[order[0]]
    assert (st, json.loads(flagged), retries, dropped, j, model) == ("ok", [1], 2, 1, "gemini", "gemini-2.5-flash")
    assert frac == pytest.approx(1 / m)
    for tid, why in ((order[1], "invalid reply after one repair"), (order[2], "400")):
        st, _, _, frac, reason, *_ = stored[tid]
        assert st == "failed" and frac is None and why in reason  # failed, never "no backtracking"
    assert "[REDACTED]" in stored[order[2]][4]

    n_requests = len(gemini.requests)
    p2 = legival("judge", "--db", str(db), "--limit", "3", env=env)
    s2 = last_json(p2)
    assert (s2["judge_calls"], s2["cached"], s2["todo"]) == (0, 15, 0)
    assert len(gemini.requests) == n_requests

    rep = tmp_path / "report"
    p3 = legival("report", "--db", str(db), "--out", str(rep))
    import polars as pl

    traces = pl.read_parquet(rep / "traces.parquet")
    method = dict(zip(traces["trace_id"], traces["backtracking_method"], strict=True))
    for tid in order:
        ok = stored[tid][0] == "ok"
        assert (method[tid] == "judge:gemini/gemini-2.5-flash") == ok
    tdm = list(csv.DictReader((rep / "teacher_dataset_metrics.csv").open()))
    assert len(tdm) == 5 and all("judge:gemini/gemini-2.5-flash" in r["backtracking_method"] for r in tdm)

    assert_key_nowhere(KEY, p1.stdout, p1.stderr, p2.stdout, p2.stderr, p3.stdout, p3.stderr,
                       paths=[db, rep, *tmp_path.glob("*.wal")])


def test_cli_missing_key_is_a_clear_error_and_estimate_calls_nothing(db: Path, gemini: FakeGemini) -> None:
    p = legival("judge", "--db", str(db), env=clean_env(LEGIVAL_GEMINI_BASE_URL=gemini.url), check=False)
    assert p.returncode == 2 and "error:" in p.stderr and "GEMINI_API_KEY" in p.stderr
    # --estimate needs no key and sends nothing
    s = last_json(legival("judge", "--db", str(db), "--estimate", env=clean_env(LEGIVAL_GEMINI_BASE_URL=gemini.url)))
    assert s["estimate_only"] and s["judge_calls"] == 0 and s["todo"] == 80
    assert s["estimated_cost_usd"] > 0 and s["estimated_input_tokens"] > 0
    s = last_json(legival("judge", "--db", str(db), "--estimate", "--batch", "--limit", "1",
                          env=clean_env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=gemini.url)))
    assert s["todo"] == 5 and s["judge_calls"] == 0
    assert gemini.requests == []
    assert rows(db, "SELECT count(*) FROM judge_results") == [(0,)]


def test_cli_max_cost_guard_refuses_before_any_call(db: Path, gemini: FakeGemini) -> None:
    env = clean_env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=gemini.url)
    p = legival("judge", "--db", str(db), "--max-cost-usd", "0.001", env=env, check=False)
    assert p.returncode == 2 and "error:" in p.stderr and "max_cost_usd" in p.stderr
    assert gemini.requests == [] and rows(db, "SELECT count(*) FROM judge_results") == [(0,)]
    s = last_json(legival("judge", "--db", str(db), "--limit", "1", "--max-cost-usd", "5", env=env))
    assert s["judge_calls"] == 5 and len(gemini.requests) == 5


# -------------------------------------------------------------------------------- openai-compatible


def test_cli_openai_compatible_judge(db: Path) -> None:
    with FakeOpenAI() as srv:
        env = clean_env(LEGIVAL_OPENAI_API_KEY=OPENAI_KEY)
        args = ("judge", "--db", str(db), "--judge", "openai-compatible", "--model", "local-judge",
                "--base-url", f"{srv.url}/v1", "--limit", "2")
        p1 = legival(*args, env=env)
        s1 = last_json(p1)
        assert (s1["judge_calls"], s1["ok"], s1["failed"], s1["judge"]) == (10, 10, 0, "openai-compatible")
        assert len(srv.completion_calls()) == 10
        assert srv.completion_calls()[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"
        p2 = legival(*args, env=env)
        assert last_json(p2)["cached"] == 10 and len(srv.completion_calls()) == 10
    got = rows(db, "SELECT DISTINCT judge, model, status FROM judge_results")
    assert got == [("openai-compatible", "local-judge", "ok")]
    assert_key_nowhere(OPENAI_KEY, p1.stdout, p1.stderr, p2.stdout, p2.stderr, paths=[db])
    p = legival("judge", "--db", str(db), "--judge", "openai-compatible", env=env, check=False)
    assert p.returncode == 2 and "--model" in p.stderr


# ------------------------------------------------------------------------------- stage, in process


def make_judge(srv: FakeGemini, **kw: Any) -> GeminiJudge:
    kw.setdefault("limits", FAST)
    return GeminiJudge(api_key=KEY, base_url=srv.url, **kw)


def test_selection_is_stable_and_limit_is_per_teacher_dataset(db: Path) -> None:
    with Store(db) as s:
        sel = select_traces(s, "k", limit=2)
        assert sel.selected == 10 and len(sel.todo) == 10 and sel.cached == 0
        assert select_traces(s, "k", limit=2).todo == sel.todo
        first = q(s, "SELECT trace_id FROM traces ORDER BY teacher, dataset, problem_id, trace_id LIMIT 2")
        assert list(sel.todo[:2]) == [t for (t,) in first]
        with pytest.raises(ValueError):
            select_traces(s, "k", limit=-1)


def test_steps_are_numbered_from_1_with_the_stored_segmentation(db: Path, gemini: FakeGemini) -> None:
    from legival_core.judges.prompt import render_steps
    from legival_core.segment import segment
    from tests.fakes.gemini_server import user_texts

    with Store(db) as s:
        judge_missing(s, make_judge(gemini), limit=1)
        tid, text = q(s, "SELECT trace_id, reasoning FROM traces ORDER BY teacher, dataset, problem_id, "
                          "trace_id LIMIT 1")[0]
        (m,) = q(s, "SELECT m FROM judge_results WHERE trace_id = ?", [tid])[0]
    steps = segment(text).sentences()
    assert m == len(steps)
    sent = [user_texts(r.body)[0] for r in gemini.generate_calls()]
    assert any(f"--- TRACE START ---\n{render_steps(steps)}\n--- TRACE END ---" in t for t in sent)


class ScriptedJudge:
    """A judge without a server, whose `crash_on`-th call to judge_many raises (a crash mid-run)."""

    name = "scripted"
    model = "s1"
    prompt_version = "v1"

    def __init__(self, crash_on: int | None = None) -> None:
        self.crash_on = crash_on
        self.calls = 0
        self.seen: list[str] = []

    def cache_key_params(self) -> dict[str, Any]:
        return {"judge": self.name, "model": self.model, "prompt_version": self.prompt_version}

    def judge_many(self, requests: Sequence[JudgeRequest], progress: Any = None) -> list[JudgeResult]:
        self.calls += 1
        if self.calls == self.crash_on:
            raise KeyboardInterrupt("simulated crash")
        out = []
        for i, r in enumerate(requests, start=1):
            self.seen.append(r.trace_id)
            out.append(JudgeResult(r.trace_id, "ok", flagged_steps=(1,), backtracking_detected=True,
                                   confidence=1.0, raw_json="{}"))
            if progress:
                progress(i)
        return out


def test_results_are_committed_chunk_by_chunk_and_a_crash_loses_only_the_chunk_in_flight(db: Path) -> None:
    crashing = ScriptedJudge(crash_on=3)
    with Store(db) as s:
        with pytest.raises(KeyboardInterrupt):
            judge_missing(s, crashing, chunk_size=10)
        assert q(s, "SELECT count(*) FROM judge_results") == [(20,)]
        seen: list[tuple[int, int]] = []
        again = ScriptedJudge()
        summary = judge_missing(s, again, chunk_size=10, progress=lambda d, t: seen.append((d, t)))
    assert (summary.cached, summary.judge_calls, summary.ok) == (20, 60, 60)
    assert not set(again.seen) & set(crashing.seen)
    assert seen[0] == (0, 60) and seen[-1] == (60, 60)
    assert (25, 60) in seen  # ticks inside a chunk, not only per committed chunk
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_retry_failed_rejudges_only_failed_rows(db: Path, gemini: FakeGemini) -> None:
    gemini.script.extend([Canned.error(400)])
    with Store(db) as s:
        j = make_judge(gemini, limits=JudgeLimits(concurrency=1, timeout_s=10))
        first = judge_missing(s, j, limit=1)
        assert (first.failed, first.ok) == (1, 4)
        assert judge_missing(s, j, limit=1).judge_calls == 0
        again = judge_missing(s, j, limit=1, retry_failed=True)
        assert (again.judge_calls, again.ok, again.cached) == (1, 1, 4)
        assert q(s, "SELECT status, count(*) FROM judge_results GROUP BY status") == [("ok", 5)]


def test_max_cost_guard_in_the_stage(db: Path, gemini: FakeGemini) -> None:
    with Store(db) as s:
        with pytest.raises(CostLimitExceeded, match="max_cost_usd"):
            judge_missing(s, make_judge(gemini), max_cost_usd=1e-6)
        est = judge_missing(s, make_judge(gemini), estimate_only=True)
        assert est.judge_calls == 0 and est.estimated_cost_usd > 0
        half = judge_missing(s, make_judge(gemini), estimate_only=True, batch=True)
        assert half.estimated_cost_usd == pytest.approx(est.estimated_cost_usd / 2)
    assert gemini.requests == []


def test_estimate_only_samples_a_large_selection(db: Path, gemini: FakeGemini,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ESTIMATE_SAMPLE traces an estimate renders an even spread of them and scales it (a
    paper-scale plan); below it, every prompt. Calls stay exact; tokens come near the full estimate."""
    import legival_core.judges.judging as jc

    with Store(db) as s:
        full = judge_missing(s, make_judge(gemini), estimate_only=True)
        monkeypatch.setattr(jc, "ESTIMATE_SAMPLE", 20)
        part = judge_missing(s, make_judge(gemini), estimate_only=True)
    assert full.estimate_basis == "" and full.todo > 20
    assert part.estimate_basis == f"sampled 20 of {full.todo} traces"
    assert part.todo == full.todo and part.judge_calls == 0
    assert part.estimated_output_tokens == pytest.approx(full.estimated_output_tokens, rel=0.05)
    assert part.estimated_input_tokens == pytest.approx(full.estimated_input_tokens, rel=0.3)
    assert part.estimated_input_tokens != full.estimated_input_tokens  # really a sample, not every prompt
    assert part.estimated_cost_usd == pytest.approx(full.estimated_cost_usd, rel=0.3)
    assert jc.spread(list("abcdefghij"), 4) == ["a", "c", "f", "h"]
    assert gemini.requests == []


def test_judge_key_covers_model_and_prompt_version(gemini: FakeGemini) -> None:
    a, b = make_judge(gemini), make_judge(gemini, model="gemini-2.5-pro")
    assert judge_key(a) != judge_key(b)
    c = GeminiJudge(api_key="other", base_url=gemini.url, limits=JudgeLimits(concurrency=2))
    assert judge_key(a) == judge_key(c)  # key, endpoint and concurrency do not change a judgement


# ------------------------------------------------------------------------------------------ batch


def test_batch_resumes_a_recorded_job_instead_of_resubmitting(db: Path, gemini: FakeGemini) -> None:
    gemini.batch_pending_polls = 2
    with Store(db) as s:
        j = make_judge(gemini)
        first = judge_missing(s, j, limit=2, batch=True, wait=False)  # "crash" right after recording
        (name,) = first.batches_submitted
        assert first.batches_pending == [name] and first.judge_calls == 0
        (recorded,) = q(s, "SELECT batch_name, judge_key, state, trace_ids FROM judge_batches")
        assert recorded[:3] == (name, judge_key(j), "submitted") and len(json.loads(recorded[3])) == 10
        assert q(s, "SELECT count(*) FROM judge_results") == [(0,)]
        # a rerun while the job is still running submits nothing new and leaves it pending
        still = judge_missing(s, make_judge(gemini), limit=2, batch=True, wait=False)
        assert still.batches_resumed == [name] and still.batches_pending == [name]
        assert still.batches_submitted == [] and still.todo == 0

        resumed = judge_missing(s, make_judge(gemini), limit=2, batch=True, poll_interval_s=0.01)
        assert resumed.batches_resumed == [name] and resumed.batches_submitted == []
        assert (resumed.judge_calls, resumed.ok) == (10, 10)
        assert q(s, "SELECT state FROM judge_batches") == [("collected",)]
        assert q(s, "SELECT count(*) FROM judge_results WHERE status = 'ok'") == [(10,)]
        creates = [r for r in gemini.requests if r.path.endswith(":batchGenerateContent")]
        assert len(creates) == 1

        done = judge_missing(s, make_judge(gemini), limit=2, batch=True, poll_interval_s=0.01)
        assert (done.judge_calls, done.cached, done.batches_resumed) == (0, 10, [])
        with pytest.raises(ValueError, match="gemini"):
            judge_missing(s, ScriptedJudge(), batch=True)
    assert len([r for r in gemini.requests if r.path.endswith(":batchGenerateContent")]) == 1


class CrashWhilePolling(GeminiJudge):
    """A run that dies once its jobs exist, at the first poll."""

    def poll_batch(self, name: str) -> Any:
        raise KeyboardInterrupt("simulated crash while polling")


def test_every_job_is_recorded_before_any_poll_and_a_crash_loses_none(db: Path, gemini: FakeGemini) -> None:
    with Store(db) as s:
        crashing = CrashWhilePolling(api_key=KEY, base_url=gemini.url, limits=FAST)
        with pytest.raises(KeyboardInterrupt):
            judge_missing(s, crashing, limit=2, batch=True, batch_size=4, poll_interval_s=0.01)
        recorded = q(s, "SELECT batch_name, state, trace_ids FROM judge_batches ORDER BY batch_name")
        assert [r[1] for r in recorded] == ["submitted"] * 3  # 10 traces in jobs of 4, 4, 2
        assert sorted(len(json.loads(r[2])) for r in recorded) == [2, 4, 4]
        resumed = judge_missing(s, make_judge(gemini), limit=2, batch=True, batch_size=4, poll_interval_s=0.01)
        assert sorted(resumed.batches_resumed) == [r[0] for r in recorded] and resumed.batches_submitted == []
        assert (resumed.judge_calls, resumed.ok) == (10, 10)
        assert q(s, "SELECT DISTINCT state FROM judge_batches") == [("collected",)]
    assert len([r for r in gemini.requests if r.path.endswith(":batchGenerateContent")]) == 3


class FailsJob(GeminiJudge):
    """The provider reports `failed_job` as FAILED."""

    failed_job = ""

    def poll_batch(self, name: str) -> BatchStatus:
        if name == self.failed_job:
            return BatchStatus(name, "JOB_STATE_FAILED", True, False)
        return super().poll_batch(name)


def test_a_failed_job_is_marked_and_its_traces_are_submitted_again_in_the_same_run(
    db: Path, gemini: FakeGemini
) -> None:
    with Store(db) as s:
        first = judge_missing(s, make_judge(gemini), limit=1, batch=True, wait=False)
        (old,) = first.batches_submitted
        j = FailsJob(api_key=KEY, base_url=gemini.url, limits=FAST)
        j.failed_job = old
        again = judge_missing(s, j, limit=1, batch=True, poll_interval_s=0.01)
        assert again.batches_resumed == [old] and len(again.batches_submitted) == 1
        (new,) = again.batches_submitted
        assert new != old and (again.judge_calls, again.ok, again.todo) == (5, 5, 5)
        states = dict(q(s, "SELECT batch_name, state FROM judge_batches"))
        assert states == {old: "JOB_STATE_FAILED", new: "collected"}


def test_cli_batch_no_wait_then_resume(db: Path, gemini: FakeGemini) -> None:
    gemini.batch_pending_polls = 1
    env = clean_env(GEMINI_API_KEY=KEY, LEGIVAL_GEMINI_BASE_URL=gemini.url)
    a = last_json(legival("judge", "--db", str(db), "--batch", "--no-wait", "--limit", "1", env=env))
    assert len(a["batches_submitted"]) == 1 and a["judge_calls"] == 0
    b = last_json(legival("judge", "--db", str(db), "--batch", "--limit", "1", "--poll-interval", "0.01", env=env))
    assert b["batches_resumed"] == a["batches_submitted"] and b["judge_calls"] == 5 and b["batches_submitted"] == []
    assert len([r for r in gemini.requests if r.path.endswith(":batchGenerateContent")]) == 1
    assert_key_nowhere(KEY, paths=[db])


# ----------------------------------------------------------------------------- factory and run_judge


def test_the_registry_knows_every_judge_and_what_it_is() -> None:
    from legival_core.judges import JudgeInfo, OpenAICompatJudge, judge_info
    from legival_core.registry import entry, names

    assert {"gemini", "openai-compatible", "lexical"} <= set(names("judge"))
    assert judge_info("gemini") == JudgeInfo(llm=True, needs_model=False, batch=True)
    assert judge_info("openai-compatible") == JudgeInfo(llm=True, needs_model=True, batch=False)
    assert judge_info("lexical") == JudgeInfo(llm=False, needs_model=False, batch=False)
    assert entry("judge", "openai-compatible").obj is OpenAICompatJudge
    stage = entry("stage", "judge").meta
    assert stage.command == "legival judge --db DB" and stage.needs == ("segment",)
    listed = legival("list", "judges", env=clean_env())
    assert last_json(listed)["judges"] == sorted(names("judge"))
    assert all(n in listed.stdout for n in ("gemini", "openai-compatible", "lexical"))


def test_make_judge_builds_by_name(gemini: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> None:
    from legival_core.judges import MissingAPIKey, OpenAICompatJudge
    from legival_core.judges import make_judge as build
    from legival_core.llm.cost import Prices
    from legival_core.registry import UnknownName

    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "LEGIVAL_OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    common: dict[str, Any] = {"base_url": gemini.url, "concurrency": 3, "rpm": None}
    with pytest.raises(MissingAPIKey, match="GEMINI_API_KEY"):
        build("gemini", model=None, **common)
    placeholder = build("gemini", model=None, estimate_only=True, **common)  # an estimate needs no key
    assert isinstance(placeholder, GeminiJudge) and placeholder.model == "gemini-2.5-flash"
    assert gemini.requests == []
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    j = build("GEMINI", model="gemini-2.5-pro", prices=Prices(1.0, 2.0), **common)
    assert (j.model, j.limits.concurrency, j.prices.input_usd_per_million) == ("gemini-2.5-pro", 3, 1.0)
    assert j.judge(JudgeRequest("t", "gsm8k", "q", ("Let x = 1.", "Wait, x = 2."))).flagged_steps == (2,)
    o = build("openai-compatible", model="m", base_url="http://127.0.0.1:9", concurrency=2, rpm=5.0)
    assert isinstance(o, OpenAICompatJudge) and o.limits.rpm == 5.0
    with pytest.raises(ValueError, match="needs a model"):
        build("openai-compatible", model=None, base_url="http://127.0.0.1:9", concurrency=2, rpm=None)
    with pytest.raises(ValueError, match="calls no model"):
        build("lexical", model=None, base_url=None, concurrency=2, rpm=None)
    with pytest.raises(UnknownName, match="known: .*gemini"):
        build("gpt4", model=None, base_url=None, concurrency=2, rpm=None)


def test_run_judge_from_a_spec_section_through_a_store_access(db: Path) -> None:
    from contextlib import contextmanager

    from legival_core.run_config import Judge
    from legival_core.stages.judge import run_judge

    opened: list[int] = []

    @contextmanager
    def access() -> Iterator[Store]:  # how the Prefect driver hands out its one connection
        opened.append(1)
        with Store(db) as st:
            yield st

    with FakeOpenAI() as srv:
        cfg = Judge(name="openai-compatible", model="local-judge", base_url=srv.url, limit=1, concurrency=2)
        s = run_judge(access, cfg)
        assert (s.judge, s.model, s.selected, s.judge_calls, s.ok) == ("openai-compatible", "local-judge", 5, 5, 5)
        assert len(srv.completion_calls()) == 5 and len(opened) >= 3
        assert run_judge(access, cfg).cached == 5 and len(srv.completion_calls()) == 5
        with pytest.raises(ValueError, match=r"batch API \(gemini\)"):
            run_judge(access, cfg, batch=True)
        over = Judge(name="openai-compatible", model="other", base_url=srv.url, max_cost_usd=1e-9)
        with pytest.raises(CostLimitExceeded):
            run_judge(access, over)
        assert len(srv.completion_calls()) == 5
    assert rows(db, "SELECT count(*), min(judge_key) = max(judge_key) FROM judge_results") == [(5, True)]


def test_cli_unknown_judge_is_an_error(db: Path) -> None:
    p = legival("judge", "--db", str(db), "--judge", "gpt4", env=clean_env(), check=False)
    assert p.returncode == 2 and "error:" in p.stderr and "unknown judge 'gpt4'" in p.stderr
    assert "openai-compatible" in p.stderr  # the message lists the registered judges
    p = legival("judge", "--db", str(db), "--judge", "openai-compatible", "--model", "m", "--batch",
                env=clean_env(), check=False)
    assert p.returncode == 2 and "--batch needs --judge gemini" in p.stderr


# ---------------------------------------------------------------------------------------- lexical


@pytest.mark.slow
def test_cli_lexical_ensures_the_lexical_rows(db: Path) -> None:
    s = last_json(legival("judge", "--db", str(db), "--judge", "lexical", env=clean_env()))
    assert (s["judge"], s["judge_calls"], s["todo"]) == ("lexical", 0, 80)
    assert rows(db, "SELECT count(*) FROM trace_metrics WHERE metric = 'backtracking' AND method = 'lexical'") == [(80,)]
    again = last_json(legival("judge", "--db", str(db), "--judge", "lexical", env=clean_env()))
    assert (again["judge_calls"], again["cached"], again["todo"]) == (0, 80, 0)
