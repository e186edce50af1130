"""The one client of OpenAI-compatible servers (vLLM, SGLang, llama.cpp server, OpenAI, ...): every
chat-completions, completions and model-list request of Legi-Val is built and sent here, with httpx.

`OpenAIEndpoint(base_url, ...)` accepts a base URL with or without its trailing `/v1` and sends to
`{root}/v1/...`. The key, when there is one, goes as `Authorization: Bearer` and is scrubbed from
every message; `send` makes ONE attempt and classifies its failure (`errors`): a transport error, or
a status that `statuses` does not count as an answer, raises a `TransientError` / `ConnectionFailed`
/ `PermanentError` that keeps the httpx response or exception it came from. Retries are the
caller's (`retry.call_with_retries`); so is reading the body of an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import httpx

from legival_core.llm.errors import (
    LENIENT_STATUSES,
    STRICT_STATUSES,
    LLMError,
    Secret,
    Statuses,
    response_error,
    scrub,
    transport_error,
)

CHAT_PATH = "/chat/completions"
COMPLETIONS_PATH = "/completions"
MODELS_PATH = "/models"


def api_root(base_url: str) -> str:
    """The server's root: `base_url` without a trailing slash and without one trailing `/v1`."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class OpenAIEndpoint:
    """One OpenAI-compatible server. `timeout_s` bounds a request (`connect_timeout_s`, when given,
    its TCP connect: never more than `timeout_s`); `connections`, when given, the pool (default:
    httpx's); `headers` come before the Authorization header, sent when `api_key` is not None; `transport` is
    httpx's (tests)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float,
        connect_timeout_s: float | None = None,
        connections: int | None = None,
        statuses: Statuses = STRICT_STATUSES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.root = api_root(base_url)
        self.api_url = self.root + "/v1"
        self.statuses = statuses
        self._key = Secret(api_key) if api_key is not None else None
        sent = dict(headers or {})
        if self._key is not None:
            sent["Authorization"] = f"Bearer {self._key.get()}"
        timeout = (httpx.Timeout(timeout_s) if connect_timeout_s is None
                   else httpx.Timeout(timeout_s, connect=min(timeout_s, connect_timeout_s)))
        if connections is None:  # httpx's default pool
            self._client = httpx.Client(headers=sent, timeout=timeout, transport=transport)
        else:
            pool = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
            self._client = httpx.Client(headers=sent, timeout=timeout, transport=transport, limits=pool)

    def __repr__(self) -> str:
        return f"OpenAIEndpoint({self.api_url!r})"

    def secrets(self) -> tuple[str, ...]:
        return (self._key.get(),) if self._key is not None else ()

    def clean(self, text: str) -> str:
        """`text` without the key (and without any bearer token or `key=` value)."""
        return scrub(text, self.secrets())

    def url(self, path: str) -> str:
        return self.api_url + path

    def send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """One request to `{root}/v1{path}` (`body` as JSON); the response when its status is an
        answer, else the classified error (module docstring)."""
        try:
            r = self._client.request(method, self.url(path), json=body)
        except httpx.TransportError as e:
            raise transport_error(e, self.root, self.clean) from None
        if not self.statuses.ok(r.status_code):
            raise response_error(r, self.statuses, self.clean) from None
        return r

    def chat(self, body: dict[str, Any]) -> httpx.Response:
        """`POST /v1/chat/completions`."""
        return self.send("POST", CHAT_PATH, body)

    def close(self) -> None:
        self._client.close()


def raise_as_httpx(error: LLMError, *, retried: bool) -> NoReturn:
    """Raise a failed call as httpx would have (for callers whose own callers catch httpx's errors: a
    teacher engine under its task's retry condition): the transport error itself; a status given up
    on after retries as an `HTTPStatusError` carrying the body's first 300 characters; any other
    status as `raise_for_status` words it."""
    if error.exception is not None:
        raise error.exception
    r = error.response
    if r is None:
        raise error
    if retried:
        raise httpx.HTTPStatusError(r.text[:300], request=r.request, response=r)
    r.raise_for_status()
    raise error


def post_json(url: str, body: Mapping[str, Any], *, token: str | None = None, timeout_s: float = 600.0,
              statuses: Statuses = LENIENT_STATUSES) -> Any:
    """One JSON POST to a server of Legi-Val's own (the reward server's `/score`, docs/reward.md): its
    decoded JSON answer, or the classified error (the bearer `token` scrubbed from every message)."""
    secrets = (token,) if token else ()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers) as client:
        try:
            r = client.post(url, json=dict(body))
        except httpx.TransportError as e:
            raise transport_error(e, url, lambda t: scrub(t, secrets)) from None
    if not statuses.ok(r.status_code):
        raise response_error(r, statuses, lambda t: scrub(t, secrets)) from None
    return r.json()
