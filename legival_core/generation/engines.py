"""How a teacher model is reached: any `TextBackend` (embedded, vLLM, a plugin's, ...) or, for a
backend registered with `BackendInfo(chat_teacher=True)` (`openai`), the server's OpenAI-compatible
chat endpoint (`llm.transport`), which applies the template server-side and may return the thinking
section separately as `reasoning_content` (vLLM `--reasoning-parser`).

Both turn chat messages into a `prompt` string that identifies the request exactly (the rendered
template, or the canonical JSON of what the server renders), which is hashed into the cache key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from legival_core.backends.base import (
    BackendInfo,
    ChatMessage,
    GenerationRequest,
    Sampling,
    TextBackend,
    make_backend,
)
from legival_core.backends.lazy import LazyBackend
from legival_core.backends.vllm_backend import sampling_fields
from legival_core.llm.errors import LENIENT_STATUSES, LLMError
from legival_core.llm.fanout import fan_out
from legival_core.llm.retry import GaveUp, RetryKind, RetryPolicy, call_with_retries, doubling
from legival_core.llm.transport import OpenAIEndpoint, raise_as_httpx
from legival_core.registry import UnknownName, canonical_name, entry
from legival_core.types import canonical_json

BASE_URL_ENV = "LEGIVAL_OPENAI_BASE_URL"


@dataclass(frozen=True, slots=True)
class RawOutput:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_content: str | None = None


class TeacherEngine(Protocol):
    @property
    def model_id(self) -> str: ...

    def prompt_of(self, messages: Sequence[ChatMessage]) -> str: ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int,
                 sampling: Sequence[Sampling | None] | None = None) -> list[RawOutput]:
        """One output per prompt; `sampling[i]` is prompt i's (None or absent: greedy)."""
        ...

    def close(self) -> None: ...


class BackendEngine:
    """A `TextBackend` as a teacher. With `chat_template_kwargs` and a local `tokenizer` directory the
    prompt is rendered here (the backend interface has no template options); otherwise the backend
    renders it with `add_generation_prompt`."""

    def __init__(self, backend: TextBackend, chat_template_kwargs: dict[str, Any] | None = None,
                 tokenizer: str | None = None) -> None:
        self.backend = backend
        self.kwargs = dict(chat_template_kwargs or {})
        self._tokenizer: Any = None
        if self.kwargs and tokenizer:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.template_kwargs_applied = self._tokenizer is not None

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    def prompt_of(self, messages: Sequence[ChatMessage]) -> str:
        if self._tokenizer is not None:
            chat = [{"role": m.role, "content": m.content} for m in messages]
            return str(self._tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                                           **self.kwargs))
        return self.backend.render_chat(messages, continue_final_message=False)

    def generate(self, prompts: Sequence[str], max_new_tokens: int,
                 sampling: Sequence[Sampling | None] | None = None) -> list[RawOutput]:
        samplings = list(sampling) if sampling is not None else [None] * len(prompts)
        reqs = [GenerationRequest(f"g{i}", p, max_new_tokens, group=f"g{i}", sampling=s)
                for i, (p, s) in enumerate(zip(prompts, samplings, strict=True))]
        return [RawOutput(c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens)
                for c in self.backend.generate(reqs)]

    def close(self) -> None:
        self.backend.close()


class ChatEndpointEngine:
    """`POST /v1/chat/completions` on an OpenAI-compatible server: greedy (temperature 0), or a
    request's sampling (temperature, top_p, seed; top_k as the vLLM/SGLang extra when set). A failed
    call raises httpx's error (`llm.transport.raise_as_httpx`), which the generate task's retry
    condition reads."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 chat_template_kwargs: dict[str, Any] | None = None, concurrency: int = 8,
                 timeout_s: float = 3600.0, transport: Any = None, seed: int | None = 0,
                 max_retries: int = 4, backoff_s: float = 1.0) -> None:
        self._api = OpenAIEndpoint(base_url, api_key=os.environ.get(api_key_env) or None, timeout_s=timeout_s,
                                   statuses=LENIENT_STATUSES, transport=transport)
        self.base_url = self._api.api_url
        self.model = model
        self.kwargs = dict(chat_template_kwargs or {})
        self.concurrency = max(1, concurrency)
        self.seed = seed
        self.template_kwargs_applied = True
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.retries = 0
        self._retry = RetryPolicy(max_retries, doubling(backoff_s))

    @property
    def model_id(self) -> str:
        return self.model

    def prompt_of(self, messages: Sequence[ChatMessage]) -> str:
        return canonical_json({"messages": [[m.role, m.content] for m in messages],
                               "chat_template_kwargs": self.kwargs})

    def generate(self, prompts: Sequence[str], max_new_tokens: int,
                 sampling: Sequence[Sampling | None] | None = None) -> list[RawOutput]:
        samplings = list(sampling) if sampling is not None else [None] * len(prompts)
        return fan_out(lambda ps: self._one(ps[0], max_new_tokens, ps[1]), list(zip(prompts, samplings, strict=True)),
                       self.concurrency, name="teacher")

    def _one(self, prompt: str, max_new_tokens: int, sampling: Sampling | None = None) -> RawOutput:
        spec = json.loads(prompt)
        payload: dict[str, Any] = {
            "model": self.model, "max_tokens": max_new_tokens, "n": 1,
            "messages": [{"role": r, "content": c} for r, c in spec["messages"]],
        }
        if self.kwargs:
            payload["chat_template_kwargs"] = self.kwargs
        if self.seed is not None:
            payload["seed"] = self.seed
        payload |= sampling_fields(sampling, http=True)  # a sampled request carries its own seed
        data = self._post(payload)
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        usage = data.get("usage") or {}
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return RawOutput(str(msg.get("content") or ""), finish, int(usage.get("prompt_tokens", 0)),
                         int(usage.get("completion_tokens", 0)),
                         None if reasoning is None else str(reasoning))

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Retries (exponential backoff) on transport errors, 408/409/429 and 5xx; other 4xx fail at once."""
        failure: LLMError
        try:
            resp = call_with_retries(lambda: self._api.chat(payload), self._retry, on_retry=self._count_retry)
        except GaveUp as g:
            failure, retried = g.error, True
        except LLMError as e:
            failure, retried = e, False
        else:
            data: dict[str, Any] = resp.json()
            return data
        raise_as_httpx(failure, retried=retried)  # outside the handler: httpx's error keeps its own context

    def _count_retry(self, kind: RetryKind, n: int, delay: float, error: LLMError) -> None:
        self.retries += 1

    def close(self) -> None:
        self._api.close()


def chat_teacher(backend: str) -> bool:
    """Whether a teacher on the registered backend generates through its server's chat endpoint
    (`BackendInfo.chat_teacher`); False for a name that is not registered."""
    try:
        info = entry("backend", canonical_name("backend", backend)).meta
    except UnknownName:
        return False
    return isinstance(info, BackendInfo) and info.chat_teacher


def make_teacher_engine(backend: str, model: str | None, chat_template_kwargs: dict[str, Any],
                        tokenizer: str | None, options: dict[str, Any] | None = None,
                        base_url: str | None = None) -> TeacherEngine:
    """The engine for the registered backend `backend`: one whose `BackendInfo.chat_teacher` is set
    (`openai`) is its server's chat endpoint (`ChatEndpointEngine`, at `base_url` or
    LEGIVAL_OPENAI_BASE_URL, serving `model`); any other is a `TextBackend` (embedded, vllm, a plugin
    backend, ...) built by the uniform factory `make_backend(backend, model, dtype, options)`, with
    `dtype` taken from `options` (None: the backend's default). Raises ValueError for what the caller
    must fix. The backend model loads lazily, on first use."""
    options = dict(options or {})
    try:
        name = canonical_name("backend", backend)
    except UnknownName as e:
        raise ValueError(f"unknown generation backend {backend!r}: {e}") from None
    if chat_teacher(name):
        url = base_url or os.environ.get(BASE_URL_ENV)
        if not url:
            raise ValueError(f"backend {name} needs a base URL (--base-url, `base_url:` or {BASE_URL_ENV})")
        if not model:
            raise ValueError(f"backend {name} needs the served model id")
        return ChatEndpointEngine(str(url), model, chat_template_kwargs=chat_template_kwargs, **options)
    dtype = options.pop("dtype", None)
    return BackendEngine(LazyBackend(lambda: make_backend(name, model, dtype, options)), chat_template_kwargs,
                         tokenizer)
