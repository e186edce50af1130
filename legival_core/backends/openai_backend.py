"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, ...) as a Legi-Val backend.

It uses the raw `POST /v1/completions` endpoint, not chat: a rollout prompt ends inside an open
assistant message (prefix(k), SPEC section 4), which chat endpoints would close. The prompt is
rendered here with the model's chat template from a local tokenizer directory, so `render_chat` and
`count_tokens` never touch the network. Decoding is greedy unless a request samples (temperature,
top_p, its seed; top_k as the vLLM/SGLang extra when set); token counts come from the server's
`usage`, the prefix-cache hit from `usage.prompt_tokens_details.cached_tokens` where the server
reports it (vLLM: `--enable-prompt-tokens-details`), else 0. A request's `repetition_penalty` other
than 1.0 is sent as the vLLM/SGLang extra parameter of that name (plain OpenAI servers reject it).

Requests go through `llm.transport.OpenAIEndpoint` (statuses classified leniently,
`llm.errors.LENIENT_STATUSES`) and `llm.retry.call_with_retries` (doubling backoff with jitter; a
Retry-After is not read).

Stop rules are applied after the fact, like the vLLM backend: the continuation is cut at the first
token boundary where the rule holds. With `vllm_extensions=True` the server returns the generated
token ids (`return_token_ids`) and the cut is exact; otherwise the text is re-tokenized locally.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from legival_core.backends.base import BackendInfo, ChatMessage, Completion, FinishReason, GenerationRequest
from legival_core.backends.prompt_format import render_chat_with, turn_end
from legival_core.backends.stop_rules import cut_at_rule
from legival_core.backends.vllm_backend import (
    overflow_completion,
    sampling_fields,
    submission_order,
)
from legival_core.llm.errors import LENIENT_STATUSES, EndpointRefused, LLMError, PermanentError
from legival_core.llm.fanout import fan_out
from legival_core.llm.retry import GaveUp, RetryKind, RetryPolicy, call_with_retries, doubling
from legival_core.llm.transport import COMPLETIONS_PATH, MODELS_PATH, OpenAIEndpoint
from legival_core.registry import register


class OpenAIBackendError(RuntimeError):
    """The server refused a request (4xx) or kept failing after all retries."""


class OpenAIServerUnavailable(OpenAIBackendError, ConnectionError):
    """The server kept failing (unreachable, 5xx, 429) after all retries, or refuses every request (a
    key, a model, a URL: `llm.errors.EndpointRefused`): the service's condition, not
    the unit's (a `ConnectionError`: `stages.isolation` raises it instead of storing a failed unit,
    so the units stay to do)."""


class OpenAICompatBackend:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        tokenizer_dir: str | Path | None = None,
        model_id: str | None = None,
        context_length: int | None = None,
        concurrency: int = 8,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 600.0,
        vllm_extensions: bool = False,
        seed: int | None = 0,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        if tokenizer_dir is None:
            from legival_core.backends.smollm2 import smollm2_safetensors_dir

            tokenizer_dir = smollm2_safetensors_dir()
        self._api = OpenAIEndpoint(base_url, api_key=os.environ.get(api_key_env) or None, timeout_s=timeout_s,
                                   statuses=LENIENT_STATUSES)
        self.base_url = self._api.api_url
        self.model = model
        self.model_id: str = model_id or model
        self.concurrency = max(1, concurrency)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.vllm_extensions = vllm_extensions
        self.seed = seed
        self.retries = 0
        self._retry = RetryPolicy(max_retries, doubling(backoff_s, jitter=True))
        self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self.context_length: int = (
            context_length or self._server_context_length() or self._local_context_length()
        )

    def _server_context_length(self) -> int | None:
        """vLLM lists `max_model_len` for each served model under /v1/models."""
        try:
            data = self._request("GET", MODELS_PATH).get("data", [])
        except OpenAIBackendError:
            return None
        for entry in data:
            if entry.get("id") == self.model and entry.get("max_model_len"):
                return int(entry["max_model_len"])
        return None

    def _local_context_length(self) -> int:
        n = getattr(self._tokenizer, "model_max_length", None)
        if isinstance(n, int) and 0 < n < 10**7:
            return n
        raise OpenAIBackendError("cannot tell the model's context length; pass context_length=")

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call with retries (exponential backoff with jitter) on connection errors, timeouts,
        5xx and 408/409/429; other 4xx fail at once with the server's message."""
        url = self._api.url(path)
        try:
            resp = call_with_retries(lambda: self._api.send(method, path, payload), self._retry,
                                     on_retry=self._count_retry)
        except GaveUp as g:
            what = _what(g.error, self._api.clean)
            raise OpenAIServerUnavailable(f"{method} {url} failed after {g.retries + 1} attempts: {what}") from None
        except EndpointRefused as e:  # the key, the model or the URL: every request alike
            raise OpenAIServerUnavailable(f"{method} {url} -> {_what(e, self._api.clean)}") from None
        except PermanentError as e:
            raise OpenAIBackendError(f"{method} {url} -> {_what(e, self._api.clean)}") from None
        data: dict[str, Any] = resp.json()
        return data

    def _count_retry(self, kind: RetryKind, n: int, delay: float, error: LLMError) -> None:
        self.retries += 1

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        return render_chat_with(self._tokenizer, messages, continue_final_message)

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    def count_tokens(self, text: str) -> int:
        return len(self._encode(text))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        lengths = [self.count_tokens(r.prompt) for r in requests]
        results: list[Completion | None] = [None] * len(requests)
        todo: list[int] = []
        for i in submission_order(requests, lengths):
            if lengths[i] >= self.context_length:
                results[i] = overflow_completion(requests[i], lengths[i])
            else:
                todo.append(i)
        for i, c in zip(todo, fan_out(lambda i: self._one(requests[i], lengths[i]), todo, self.concurrency,
                                      name="student"), strict=True):
            results[i] = c
        return [c for c in results if c is not None]

    def _one(self, request: GenerationRequest, prompt_len: int) -> Completion:
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": request.prompt,
            "max_tokens": max(1, min(request.max_new_tokens, self.context_length - prompt_len)),
            "n": 1,
            "stream": False,
        }
        if self.seed is not None:
            payload["seed"] = self.seed
        payload |= sampling_fields(request.sampling, http=True)  # its seed, when sampling, is the request's own
        if (end := turn_end(self._tokenizer)) is not None:  # a base model's end of turn, cut as embedded does
            payload["stop"] = [end]
        if request.repetition_penalty != 1.0:  # not in the OpenAI API; vLLM's server takes it as an extra
            payload["repetition_penalty"] = request.repetition_penalty
        if self.vllm_extensions:
            payload |= {"return_token_ids": True, "add_special_tokens": False, "skip_special_tokens": True}
        data = self._request("POST", COMPLETIONS_PATH, payload)
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        text = str(choice.get("text") or "")
        prompt_tokens = int(usage.get("prompt_tokens", prompt_len))
        n = int(usage.get("completion_tokens", 0))
        details = usage.get("prompt_tokens_details") or {}
        cached = min(int(details.get("cached_tokens") or 0), prompt_tokens)
        finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        if request.stop_rule is not None:
            ids = choice.get("token_ids")
            cut = cut_at_rule(ids if ids is not None else self._encode(text), self._decode, request.stop_rule)
            if cut is not None:
                text, n, finish = cut.text, cut.n_tokens, "rule"
        return Completion(
            request_id=request.request_id,
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=n,
            finish_reason=finish,
            prefill_computed=prompt_tokens - cached,
            prefill_cached=cached,
        )

    def close(self) -> None:
        self._api.close()


def _what(error: LLMError, clean: Callable[[str], str]) -> str:
    """A failed call as this backend words it: `HTTP <status>: <body>` or `<httpx error>: <message>`."""
    if error.exception is not None:
        return clean(f"{type(error.exception).__name__}: {error.exception}")
    return str(error)


@register("backend", "openai",
          meta=BackendInfo(dtypes=("float32", "bfloat16", "float16", "auto"), chat_teacher=True))
def make_openai_backend(model: str | None = None, dtype: str | None = None, **options: Any) -> OpenAICompatBackend:
    """An OpenAI-compatible /v1/completions server (vLLM serve, ...), prompts rendered with our template.

    `dtype` is the served model's precision: part of the student's identity, not sent anywhere. A
    teacher on this backend generates through the server's chat endpoint instead (`chat_teacher`)."""
    if model is not None:
        options.setdefault("model", model)
    return OpenAICompatBackend(**options)
