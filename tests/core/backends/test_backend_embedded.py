"""Embedded backend: GGUF export cache, chat rendering, prefix-cached vs naive generation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from legival_core.backends import shipped, smollm2
from legival_core.backends.base import ChatMessage, GenerationRequest, Sampling
from legival_core.backends.embedded import EmbeddedBackend

SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."
QUESTION = "Tom has 3 boxes with 4 apples each. He eats 2 apples. How many apples are left?"
STEPS = ("There are 3 boxes of 4 apples.", " That is 3 * 4 = 12 apples.", " He eats 2, so 12 - 2 = 10.")


def _fake_export(gguf: Path, out: Path, plain_prompt: bool = False) -> None:
    for name in smollm2._REQUIRED_FILES:
        (out / name).write_text("x")


def test_gguf_is_found_without_importing_the_package() -> None:
    path = smollm2.smollm2_gguf_path()
    assert path.name == smollm2.GGUF_FILENAME and path.stat().st_size > 50_000_000


def test_export_is_done_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []

    def export(gguf: Path, out: Path, plain_prompt: bool = False) -> None:
        calls.append(out)
        _fake_export(gguf, out)

    monkeypatch.setattr(shipped, "_export", export)
    first = smollm2.smollm2_safetensors_dir(tmp_path)
    second = smollm2.smollm2_safetensors_dir(tmp_path)
    assert first == second == tmp_path / "models" / smollm2.EXPORT_DIR_NAME
    assert len(calls) == 1 and calls[0] != first  # written elsewhere, then renamed into place
    assert smollm2.is_complete_export(first)
    monkeypatch.setenv("LEGIVAL_CACHE_DIR", str(tmp_path))
    assert smollm2.smollm2_safetensors_dir() == first and len(calls) == 1


def test_crashed_export_leaves_nothing_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(gguf: Path, out: Path, plain_prompt: bool = False) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(shipped, "_export", crash)
    with pytest.raises(KeyboardInterrupt):
        smollm2.smollm2_safetensors_dir(tmp_path)
    models = tmp_path / "models"
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []
    # debris of a killed process (no chance to clean up) and a half-written target are replaced
    (models / f".{smollm2.EXPORT_DIR_NAME}.tmp-dead").mkdir()
    (models / smollm2.EXPORT_DIR_NAME).mkdir()
    monkeypatch.setattr(shipped, "_export", _fake_export)
    target = smollm2.smollm2_safetensors_dir(tmp_path)
    assert smollm2.is_complete_export(target)
    assert sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) == [smollm2.EXPORT_DIR_NAME]


def test_registered_under_embedded() -> None:
    from legival_core.backends.embedded import make_embedded_backend
    from legival_core.registry import get

    assert get("backend", "embedded") is make_embedded_backend


# ---- real model (SmolLM2-135M, CPU) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def backend() -> Iterator[EmbeddedBackend]:
    b = EmbeddedBackend()
    yield b
    b.close()


class LongerThan:
    """Stop once the continuation has at least `n` characters (picklable, like real stop rules)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, text: str) -> bool:
        return len(text) >= self.n


def _prompt(backend: EmbeddedBackend, prefix: str) -> str:
    messages = [
        ChatMessage("system", SYSTEM),
        ChatMessage("user", QUESTION),
        ChatMessage("assistant", prefix),
    ]
    return str(backend.render_chat(messages, continue_final_message=True))


@pytest.mark.slow
def test_conversion_cache_is_reused(backend: EmbeddedBackend) -> None:
    started = time.perf_counter()
    path = smollm2.smollm2_safetensors_dir()
    assert time.perf_counter() - started < 1.0
    assert smollm2.is_complete_export(path)
    assert backend.load_seconds < 30


@pytest.mark.slow
def test_render_chat_continues_final_assistant_message(backend: EmbeddedBackend) -> None:
    prefix = "First, count the apples."
    prompt = _prompt(backend, prefix)
    assert prompt.endswith("<|im_start|>assistant\n" + prefix)
    ids = backend._encode(prompt)
    assert ids[-1] not in backend._eos_ids
    assert _prompt(backend, "").endswith("<|im_start|>assistant\n")
    fresh = backend.render_chat([ChatMessage("user", QUESTION)], continue_final_message=False)
    assert fresh.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert backend.count_tokens(prompt) == len(ids)


@pytest.mark.slow
def test_cached_path_equals_naive_and_accounts_tokens(backend: EmbeddedBackend) -> None:
    prompts = [_prompt(backend, "".join(STEPS[:k])) for k in (0, 1, 3)]
    reqs = [GenerationRequest(f"k{i}", p, 8, "trace", None) for i, p in enumerate(prompts)]
    # a text prefix whose tokenization is not a token prefix ("wor" vs " world"): partial reuse
    reqs.append(GenerationRequest("partial", prompts[1] + " Hello wor", 12, "trace", LongerThan(5)))
    reqs.append(GenerationRequest("partial-long", prompts[1] + " Hello world", 12, "trace", LongerThan(5)))
    reqs.append(GenerationRequest("overflow", prompts[0] + " apple" * 9000, 12, "trace", None))
    reqs.append(GenerationRequest("solo", _prompt(backend, "Apples:"), 8, "", LongerThan(1)))
    cached = backend.generate(reqs)
    naive = backend.generate_naive(reqs)
    assert [c.request_id for c in cached] == [r.request_id for r in reqs]
    for a, b in zip(cached, naive, strict=True):
        assert (a.text, a.finish_reason, a.completion_tokens, a.prompt_tokens) == (
            b.text,
            b.finish_reason,
            b.completion_tokens,
            b.prompt_tokens,
        ), a.request_id
        assert a.prefill_computed + a.prefill_cached == (
            0 if a.finish_reason == "overflow" else a.prompt_tokens
        )
    by_id = {c.request_id: c for c in cached}
    # the longest prompt of the group is prefilled once; its token prefixes reuse it entirely
    assert (by_id["k2"].prefill_computed, by_id["k2"].prefill_cached) == (by_id["k2"].prompt_tokens, 0)
    for rid in ("k0", "k1"):
        assert by_id[rid].prefill_computed == 0 and by_id[rid].prefill_cached == by_id[rid].prompt_tokens
    for rid in ("partial", "partial-long"):  # only the tokens past the shared prefix are computed
        assert by_id[rid].prefill_cached >= by_id["k1"].prompt_tokens - 1
        assert 0 < by_id[rid].prefill_computed <= 3
    assert sum(c.prefill_computed for c in cached) < sum(c.prefill_computed for c in naive) / 2
    overflow = by_id["overflow"]
    assert (overflow.finish_reason, overflow.text, overflow.completion_tokens) == ("overflow", "", 0)
    assert overflow.prompt_tokens >= backend.context_length
    for rid in ("partial", "partial-long", "solo"):
        done = by_id[rid]
        assert done.finish_reason == "rule" and len(done.text) >= (1 if rid == "solo" else 5)
    assert {by_id[r].finish_reason for r in ("k0", "k1", "k2")} <= {"length", "stop"}
    assert by_id["k0"].completion_tokens <= 8


@pytest.mark.slow
def test_repetition_penalty_cached_equals_naive_and_changes_output(backend: EmbeddedBackend) -> None:
    repetitive = _prompt(backend, STEPS[0])  # 1.0 goes on to repeat the step; 1.1 does not
    shorter = _prompt(backend, "")
    reqs = [
        GenerationRequest("long", repetitive, 16, "rep", None, 1.1),
        GenerationRequest("short", shorter, 16, "rep", None, 1.1),  # served from the long prefill
        GenerationRequest("plain", repetitive, 16, "plain", None),  # 1.0 in the same decode batch
    ]
    cached = backend.generate(reqs)
    naive = backend.generate_naive(reqs)
    for a, b in zip(cached, naive, strict=True):
        assert (a.text, a.finish_reason, a.completion_tokens) == (b.text, b.finish_reason, b.completion_tokens)
    by_id = {c.request_id: c for c in cached}
    assert by_id["short"].prefill_cached > 0
    assert by_id["long"].text != by_id["plain"].text
    assert by_id["plain"] == backend.generate([reqs[2]])[0]  # 1.0 unaffected by penalized batch mates


def test_sampling_warpers_on_hand_logits() -> None:
    """top-k keeps the k best, top-p the smallest set reaching p (HF order and semantics); the draw
    comes from the given generator, so one seed gives one sequence of tokens."""
    import torch

    from legival_core.backends.embedded import _sample

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    draws = {_sample(torch, logits.clone(), Sampling(1.0, top_k=2), torch.Generator().manual_seed(s))
             for s in range(200)}
    assert draws == {0, 1}
    # softmax = [.61, .22, .14, .03, .004]: top_p .7 keeps {0, 1}; .5 keeps only 0
    assert {_sample(torch, logits.clone(), Sampling(1.0, top_p=0.7), torch.Generator().manual_seed(s))
            for s in range(200)} == {0, 1}
    assert {_sample(torch, logits.clone(), Sampling(1.0, top_p=0.5), torch.Generator().manual_seed(s))
            for s in range(50)} == {0}
    hot = {_sample(torch, logits.clone(), Sampling(50.0), torch.Generator().manual_seed(s)) for s in range(200)}
    assert hot == {0, 1, 2, 3, 4}  # a high temperature flattens the distribution
    first = [_sample(torch, logits.clone(), Sampling(5.0), g) for g in [torch.Generator().manual_seed(7)] * 20]
    again = [_sample(torch, logits.clone(), Sampling(5.0), g) for g in [torch.Generator().manual_seed(7)] * 20]
    assert first == again
    with pytest.raises(ValueError, match="temperature"):
        Sampling(0.0)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(1.0, top_p=0.0)


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_batch_independent(backend: EmbeddedBackend) -> None:
    """A teacher's sampled request: cached batched path == naive path, alone == with batch mates,
    top_k=1 == greedy, and different seeds give different continuations."""
    prompt = _prompt(backend, "")
    shorter = _prompt(backend, STEPS[0])
    seeds = [1, 2, 3, 4]
    reqs = [GenerationRequest(f"s{s}", prompt, 12, "q", sampling=Sampling(1.3, top_p=0.95, seed=s)) for s in seeds]
    reqs += [
        GenerationRequest("greedy", prompt, 12, "q"),
        GenerationRequest("top1", shorter, 12, "q", sampling=Sampling(0.7, top_k=1, seed=9)),
        GenerationRequest("greedy-short", shorter, 12, "q"),
    ]
    cached = {c.request_id: c for c in backend.generate(reqs)}
    naive = {c.request_id: c for c in backend.generate_naive(reqs)}
    for k in cached:
        got, ref = cached[k], naive[k]
        assert (got.text, got.finish_reason, got.completion_tokens) == (ref.text, ref.finish_reason, ref.completion_tokens)
    assert cached["top1"].text == cached["greedy-short"].text
    assert len({cached[f"s{s}"].text for s in seeds}) >= 3
    assert any(cached[f"s{s}"].text != cached["greedy"].text for s in seeds)
    alone = backend.generate([reqs[1]])[0]
    assert (alone.text, alone.completion_tokens) == (cached["s2"].text, cached["s2"].completion_tokens)
