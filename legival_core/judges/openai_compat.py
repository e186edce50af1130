"""The `openai-compatible` backtracking judge: any chat-completions server (vLLM, SGLang, OpenAI, ...).

`POST {base_url}/v1/chat/completions` with the paper's system prompt as the system message and
`response_format={"type": "json_schema", ...}` carrying the reply schema (strict), sent by
`llm.transport.OpenAIEndpoint` (a trailing `/v1` on `base_url` is accepted; statuses classified
strictly, `llm.errors.STRICT_STATUSES`). Base URL: argument, else LEGIVAL_OPENAI_BASE_URL (required). Key:
argument, else LEGIVAL_OPENAI_API_KEY, else OPENAI_API_KEY; optional (local servers need none), sent
as `Authorization: Bearer`. Retries, repair, validation and windowing are the shared ones in base.py;
a refused or unknown endpoint (or a TCP connect over `JudgeLimits.connect_timeout_s`) is a
`ConnectionFailed` (`cannot connect to ...`: one short retry, then the run's breaker).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from legival_core.judges.base import BaseJudge, Reply, Turn
from legival_core.judges.factory import JudgeInfo
from legival_core.judges.prompt import RESPONSE_JSON_SCHEMA
from legival_core.judges.records import JudgeError
from legival_core.llm.errors import TransientError
from legival_core.llm.transport import OpenAIEndpoint
from legival_core.registry import register

BASE_URL_ENV = "LEGIVAL_OPENAI_BASE_URL"
KEY_ENV_VARS = ("LEGIVAL_OPENAI_API_KEY", "OPENAI_API_KEY")


class OpenAICompatJudge(BaseJudge):
    """Backtracking judge on any chat-completions server (vLLM, SGLang, OpenAI, ...); needs a model id."""

    name = "openai-compatible"

    def _connect(self, base_url: str | None, api_key: str | None) -> None:
        url = base_url or os.environ.get(BASE_URL_ENV)
        if not url:
            raise JudgeError(
                f"no endpoint for the openai-compatible judge: pass base_url= or set {BASE_URL_ENV}"
            )
        key = api_key or next((os.environ[v] for v in KEY_ENV_VARS if os.environ.get(v)), None)
        self._api = OpenAIEndpoint(
            url,
            api_key=key.strip() if key else None,
            timeout_s=self.limits.timeout_s,
            connect_timeout_s=self.limits.connect_timeout_s,
            connections=max(100, self.limits.concurrency),
            headers={"Content-Type": "application/json"},
        )
        self.base_url = self._api.root

    def _secrets(self) -> tuple[str, ...]:
        return self._api.secrets()

    def close(self) -> None:
        self._api.close()

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
        r = self._api.chat(self.body(system, turns))
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
