"""The transfer pipeline end to end with the scripted backend (deterministic), then the real
embedded SmolLM2 student on real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legival_core.run_config import student_config
from legival_core.stages.efficiency import ensure_steps
from legival_core.stages.ingest import ingest_file
from legival_core.stages.transfer import run_transfer
from legival_core.stages.transfer_traces import select_transfer_traces
from legival_core.store import Store
from tests._sql import sql
from tests.conftest import EXAMPLES
from tests.plugins.scripted import ScriptedBackend

# 7 steps: K = {0, 3, 6, 7}; bins (50*k + 6) // 7 -> 0, 22, 43, 50
REASONING = ("Janet has 16 eggs. She eats 3. She bakes with 4. That leaves 9 eggs. "
             "Each sells for 2 dollars. So 9 times 2 is 18. The total is 18.")


def _trace(pid: str, reasoning: str = REASONING, response: str = "\\boxed{18}", teacher: str = "t1") -> str:
    return json.dumps({"model": teacher, "dataset": "gsm8k", "problem_id": pid, "problem": "How much?",
                       "gold_answer": "18", "reasoning": reasoning, "response": response})


def script(prompt: str) -> str:
    """Answers 18 once the prefix shows "9 times 2"; before that, rambles (forcing pass needed).
    In the forcing pass (prompt ends with the forcing text) it answers 17 below depth 3."""
    if prompt.endswith("\\boxed{"):
        return "18} done" if "leaves 9" in prompt else "17} done"
    if "9 times 2" in prompt:
        return "Then the answer is \\boxed{18} and more words"
    return "I am not sure what to do"


@pytest.fixture
def loaded(store: Store, tmp_path: Path) -> Store:
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join([
        _trace("gsm8k-test-1"), _trace("gsm8k-test-2"),
        _trace("gsm8k-test-3", response="\\boxed{17}"),          # wrong: no transfer
        _trace("gsm8k-test-4", reasoning="", response="\\boxed{18}"),  # correct, no steps
    ]) + "\n", encoding="utf-8")
    ingest_file(store, f)
    return store


def test_selection_and_empty_traces(loaded: Store) -> None:
    ensure_steps(loaded)  # the transfer stage requires steps (it runs the segment stage first)
    traces, empty = select_transfer_traces(loaded)
    assert [t.problem.problem_id for t in traces] == ["gsm8k-test-1", "gsm8k-test-2"]
    assert empty == 1
    assert [t.problem.problem_id for t in select_transfer_traces(loaded, limit=1)[0]] == ["gsm8k-test-1"]


def test_rollouts_two_pass_grading_and_resume(loaded: Store) -> None:
    backend = ScriptedBackend(script)
    cfg = student_config(name="scripted", backend="scripted", model="scripted-1", max_new_tokens=50)
    s = run_transfer(loaded, backend, cfg)
    assert (s.transfer_traces, s.empty_correct_traces) == (2, 1)
    assert (s.rollouts_total, s.rollouts_cached, s.rollouts_generated) == (8, 0, 8)
    rows = sql(loaded,
        "SELECT k, bin, m, status, correct, forced, extracted, continuation, forced_continuation "
        "FROM rollouts WHERE trace_id = (SELECT min(trace_id) FROM rollouts) ORDER BY k").to_dicts()
    assert [(r["k"], r["bin"], r["m"]) for r in rows] == [(0, 0, 7), (3, 22, 7), (6, 43, 7), (7, 50, 7)]
    # k=0: unparsed -> forced, "17}" wrong; k=3: forced (prefix has "leaves 9"? no: 3 steps) -> 17, wrong;
    # k=6 and k=7: the prefix contains "9 times 2" -> first answer 18, stopped at the closing brace.
    assert [r["forced"] for r in rows] == [True, True, False, False]
    assert [r["correct"] for r in rows] == [False, False, True, True]
    assert [r["extracted"] for r in rows] == ["17", "17", "18", "18"]
    assert rows[2]["continuation"] == "Then the answer is \\boxed{18}"  # first-answer early stop
    assert rows[0]["forced_continuation"] == "17}"
    # the forcing prompt is prompt + continuation + forcing text
    forced_req = [r for r in backend.calls if r.request_id.endswith(":0:forced")][0]
    assert forced_req.prompt.endswith("I am not sure what to do" + "The answer is \\boxed{")
    assert forced_req.max_new_tokens == cfg.forcing_max_tokens

    again = run_transfer(loaded, ScriptedBackend(script), cfg)
    assert (again.rollouts_total, again.rollouts_cached, again.rollouts_generated) == (8, 8, 0)
    # another backend serving the same model and decoding reuses the rollouts (key excludes backend)
    other = student_config(name="other-name", backend="embedded", model="scripted-1", max_new_tokens=50)
    assert other.student_key == cfg.student_key
    assert student_config(model="scripted-1", max_new_tokens=51).student_key != cfg.student_key


def test_overflow_is_recorded_not_graded(loaded: Store) -> None:
    # the scripted tokenizer counts words; the k=7 prompt has more words than the k=0 prompt
    k0_len = len(ScriptedBackend(script).render_chat(
        __import__("legival_core.transfer.rollout_plan", fromlist=["x"]).student_messages(
            __import__("legival_core.datasets", fromlist=["x"]).get_dataset("gsm8k").system_prompt, "How much?", ""), True).split())
    backend = ScriptedBackend(script, context_length=k0_len + 10)
    s = run_transfer(loaded, backend, student_config(backend="scripted", model="scripted-small", max_new_tokens=50))
    assert s.overflow > 0
    rows = sql(loaded, "SELECT status, correct FROM rollouts WHERE status = 'overflow'").to_dicts()
    assert rows and all(r["correct"] is None for r in rows)


def test_preprint_profile_depths_and_prefixes(loaded: Store) -> None:
    backend = ScriptedBackend(script)
    cfg = student_config(backend="scripted", model="scripted-1", max_new_tokens=50, profile="preprint")
    run_transfer(loaded, backend, cfg)
    ks = sql(loaded, "SELECT DISTINCT k FROM rollouts WHERE student_key = ? ORDER BY k", [cfg.student_key])
    assert ks["k"].to_list() == [0, 3, 6]  # range(0, 7, 3) plus m-1 = 6; never m
    k3 = [r for r in backend.calls if r.request_id.endswith(":3")][0]
    assert "She eats 3.\nShe bakes with 4." in k3.prompt  # sentences re-joined with newlines
    # the released code decodes with repetition penalty 1.1, in both passes
    assert backend.calls and any(r.request_id.endswith(":forced") for r in backend.calls)
    assert {r.repetition_penalty for r in backend.calls} == {1.1}


def test_spec_profile_requests_carry_no_repetition_penalty(loaded: Store) -> None:
    backend = ScriptedBackend(script)
    run_transfer(loaded, backend, student_config(backend="scripted", model="scripted-1", max_new_tokens=50))
    assert any(r.request_id.endswith(":forced") for r in backend.calls)
    assert {r.repetition_penalty for r in backend.calls} == {1.0}


@pytest.mark.slow
def test_embedded_student_on_real_traces(tmp_path: Path) -> None:
    from legival_core.transfer.students import make_student_backend

    store = Store(tmp_path / "e.duckdb")
    ingest_file(store, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
    cfg = student_config(max_new_tokens=12, step_interval=6)
    backend = make_student_backend(cfg)
    try:
        s = run_transfer(store, backend, cfg, teacher="openai/gpt-oss-120b", limit=2)
    finally:
        backend.close()
    assert s.transfer_traces == 2 and s.rollouts_generated == s.rollouts_total > 2
    assert s.prefill_cached > 0  # later depths of a trace reuse the earlier prefix
    rows = sql(store, "SELECT k, m, status, prompt_tokens, completion_tokens FROM rollouts").to_dicts()
    assert all(r["status"] == "ok" and r["prompt_tokens"] > 0 for r in rows)
    assert {r["k"] for r in rows} >= {0}
    s2 = run_transfer(store, make_student_backend(cfg), cfg, teacher="openai/gpt-oss-120b", limit=2)
    assert s2.rollouts_generated == 0 and s2.rollouts_cached == s.rollouts_total
    # the same real model answering early (the forcing text right after each prefix, 8 tokens at most)
    early = student_config(max_new_tokens=12, step_interval=6, forcing_max_tokens=8, mode="early_answer")
    backend = make_student_backend(early)
    try:
        e = run_transfer(store, backend, early, teacher="openai/gpt-oss-120b", limit=2)
    finally:
        backend.close()
    assert e.rollouts_generated == e.forced == s.rollouts_total
    pairs = sql(store, "SELECT r.prompt_tokens AS p, e.prompt_tokens AS pe, e.completion_tokens AS c, e.status, "
                       "e.grade_status FROM rollouts r JOIN early_answers e USING (trace_id, k)").to_dicts()
    assert len(pairs) == s.rollouts_total
    # each early prompt is the rollout's prompt plus the forcing text (and a line break after a prefix)
    assert all(r["status"] == "ok" and r["pe"] > r["p"] and 0 < r["c"] <= 8 and r["grade_status"] for r in pairs)
    store.close()


def test_early_answering_forces_the_answer_at_once_into_its_own_table(loaded: Store) -> None:
    """Lanham et al.'s early answering: one pass per depth, the forcing text right after the prefix (its
    own line), at most forcing_max_tokens; rows in `early_answers`, none in `rollouts`; a rerun computes
    nothing; the continue mode's student key is the one it always was."""
    backend = ScriptedBackend(script)
    cfg = student_config(name="early", backend="scripted", model="scripted-1", max_new_tokens=50, mode="early_answer")
    plain = student_config(name="scripted", backend="scripted", model="scripted-1", max_new_tokens=50)
    assert cfg.student_key != plain.student_key and "mode" not in plain.decoding()
    s = run_transfer(loaded, backend, cfg)
    assert (s.rollouts_total, s.rollouts_generated, s.forced) == (8, 8, 8)
    assert sql(loaded, "SELECT count(*) AS n FROM rollouts")["n"][0] == 0
    rows = sql(loaded, "SELECT k, correct, forced, continuation, forced_continuation, extracted FROM early_answers "
                       "WHERE trace_id = (SELECT min(trace_id) FROM early_answers) ORDER BY k").to_dicts()
    assert [r["k"] for r in rows] == [0, 3, 6, 7]
    # the script answers 18 once the prefix shows "leaves 9" (step 4): k = 0, 3 wrong; 6, 7 right
    assert [r["correct"] for r in rows] == [False, False, True, True]
    assert all(r["forced"] and r["continuation"] == "" for r in rows)
    assert [r["extracted"] for r in rows] == ["17", "17", "18", "18"]
    assert len(backend.calls) == 8 and all(r.max_new_tokens == cfg.forcing_max_tokens for r in backend.calls)
    at3 = [r for r in backend.calls if r.request_id.endswith(":3:early")][0]
    assert at3.prompt.endswith("She bakes with 4.\n\nThe answer is \\boxed{")
    at0 = [r for r in backend.calls if r.request_id.endswith(":0:early")][0]
    assert at0.prompt.endswith("<|im_start|>assistant\nThe answer is \\boxed{")  # nothing to separate
    again = run_transfer(loaded, ScriptedBackend(script), cfg)
    assert (again.rollouts_cached, again.rollouts_generated) == (8, 0)
