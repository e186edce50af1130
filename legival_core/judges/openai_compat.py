"""The `openai-compatible` backtracking judge: any chat-completions server (vLLM, SGLang, OpenAI, ...).

`POST {base_url}/v1/chat/completions` with the paper's system prompt as the system message and
`response_format={"type": "json_schema", ...}` carrying the reply schema (strict). A trailing `/v1`
on `base_url` is accepted. Base URL: argument, else LEGIVAL_OPENAI_BASE_URL (required). Key:
argument, else LEGIVAL_OPENAI_API_KEY, else OPENAI_API_KEY; optional (local servers need none), sent
as `Authorization: Bearer`. Retries, repair, validation and windowing are the shared ones in base.py;
a refused or unknown endpoint (or a TCP connect over `JudgeLimits.connect_timeout_s`) is a
`ConnectionFailed` (`cannot connect to ...`: one short retry, then the run's breaker).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import httpx

from legival_core.judges.base import (
    RETRYABLE_HTTP_STATUS,
    BaseJudge,
    ConnectionFailed,
    JudgeError,
    JudgeLimits,
    PermanentError,
    Reply,
    Secret,
    TransientError,
    Turn,
    WindowPolicy,
    cannot_connect,
)
from legival_core.judges.cost import Prices
from legival_core.judges.factory import JudgeInfo
from legival_core.judges.prompt import RESPONSE_JSON_SCHEMA
from legival_core.judges.ratelimit import parse_retry_after
from legival_core.registry import register

BASE_URL_ENV = "LEGIVAL_OPENAI_BASE_URL"
KEY_ENV_VARS = ("LEGIVAL_OPENAI_API_KEY", "OPENAI_API_KEY")


class OpenAICompatJudge(BaseJudge):
    """Backtracking judge on any chat-completions server (vLLM, SGLang, OpenAI, ...); needs a model id."""

    name = "openai-compatible"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.1,
        max_output_tokens: int | None = 8192,
        include_question: bool = False,
        limits: JudgeLimits | None = None,
        windows: WindowPolicy | None = None,
        max_cost_usd: float | None = None,
        prices: Prices | None = None,
    ) -> None:
        super().__init__(
            model=model,
            temperature=temperature,
            max_output_tokens=max_output_tokens,
            include_question=include_question,
            limits=limits,
            windows=windows,
            max_cost_usd=max_cost_usd,
            prices=prices,
        )
        url = base_url or os.environ.get(BASE_URL_ENV)
        if not url:
            raise JudgeError(
                f"no endpoint for the openai-compatible judge: pass base_url= or set {BASE_URL_ENV}"
            )
        url = url.rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        self.base_url = url
        key = api_key or next((os.environ[v] for v in KEY_ENV_VARS if os.environ.get(v)), None)
        self._key = Secret(key.strip()) if key else None
        headers = {"Content-Type": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.get()}"
        conns = max(100, self.limits.concurrency)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(self.limits.timeout_s,
                                  connect=min(self.limits.timeout_s, self.limits.connect_timeout_s)),
            limits=httpx.Limits(max_connections=conns, max_keepalive_connections=conns),
        )

    def __repr__(self) -> str:
        return f"OpenAICompatJudge(model={self.model!r}, temperature={self.temperature!r}, base_url={self.base_url!r})"

    def _secrets(self) -> tuple[str, ...]:
        return (self._key.get(),) if self._key is not None else ()

    def close(self) -> None:
        self._http.close()

    def body(self, system: str, turns: Sequence[Turn]) -> dict[str, Any]:
        """The chat-completions request body (public so tests and dry runs can inspect it)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}]
            + [{"role": role, "content": text} for role, text in turns],
            "temperature": self.temperature,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "backtracking_judgement",
                    "strict": True,
                    "schema": RESPONSE_JSON_SCHEMA,
                },
            },
        }
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        return body

    def _send(self, system: str, turns: Sequence[Turn]) -> Reply:
        try:
            r = self._http.post("/v1/chat/completions", json=self.body(system, turns))
        except httpx.ConnectTimeout as e:
            raise ConnectionFailed(self.scrub(cannot_connect(e, self.base_url, "connect timeout"))) from None
        except httpx.ConnectError as e:
            raise ConnectionFailed(self.scrub(cannot_connect(e, self.base_url))) from None
        except httpx.TimeoutException as e:
            raise TransientError(f"timeout ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise TransientError(self.scrub(f"transport error ({type(e).__name__}: {e})")) from None
        if r.status_code != 200:
            msg = self.scrub(f"HTTP {r.status_code}: {r.text[:500]}")
            if r.status_code in RETRYABLE_HTTP_STATUS:
                raise TransientError(msg, parse_retry_after(r.headers.get("retry-after")))
            raise PermanentError(msg)
        try:
            data = r.json()
            msg_obj = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise TransientError(self.scrub(f"unreadable chat-completions body: {r.text[:200]}")) from None
        content = msg_obj.get("content") if isinstance(msg_obj, dict) else None
        usage = data.get("usage") or {}
        return Reply(
            content if isinstance(content, str) else None,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )


register("judge", "openai-compatible", OpenAICompatJudge, meta=JudgeInfo(llm=True, needs_model=True, batch=False))
