"""`legival_core.llm.errors`: scrubbing, Retry-After, and the classification of httpx errors (real
sockets: a closed port, a server that never answers)."""

from __future__ import annotations

import email.utils
import socket

import httpx
import pytest

from legival_core.llm.errors import (
    RETRYABLE_HTTP_STATUS,
    ConnectionFailed,
    EndpointRefused,
    PermanentError,
    Secret,
    TransientError,
    parse_retry_after,
    scrub,
    status_error,
    transport_error,
)


def test_scrub_and_secret() -> None:
    s = scrub("key sk-1 in ?key=abc&x=1 and Bearer tok.en-1", ["sk-1", ""])
    assert s == "key [REDACTED] in ?key=[REDACTED]&x=1 and Bearer [REDACTED]"
    assert "sk-9" not in repr(Secret("sk-9")) + str(Secret("sk-9")) and Secret("sk-9").get() == "sk-9"


def test_parse_retry_after() -> None:
    assert parse_retry_after("7") == 7.0 and parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after(" ") is None and parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after(date, now=lambda: 1_000_000.0) == pytest.approx(30.0)


def test_status_error() -> None:
    assert {408, 429, 500, 502, 503, 504} == RETRYABLE_HTTP_STATUS
    e = status_error(429, "Gemini API error 429", 4.0)
    assert isinstance(e, TransientError) and e.retry_after == 4.0
    assert type(status_error(403, "no")) is EndpointRefused  # a key, account, model or URL: every request alike
    assert type(status_error(400, "no")) is PermanentError  # this request


def test_transport_errors() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError) as refused:
        httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions?key=sk-2", timeout=5)
    e = transport_error(refused.value, "fallback")
    assert type(e) is ConnectionFailed and str(e) == f"cannot connect to http://127.0.0.1:{port}: connection refused"
    assert e.exception is refused.value

    with socket.socket() as srv:  # listens, never answers: a read timeout
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with pytest.raises(httpx.ReadTimeout) as slow:
            httpx.get(f"http://127.0.0.1:{srv.getsockname()[1]}/", timeout=0.2)
    assert type(transport_error(slow.value, None)) is TransientError
    assert str(transport_error(slow.value, None)) == "timeout (ReadTimeout)"
    other = transport_error(httpx.RemoteProtocolError("peer closed Bearer abc"), None, lambda t: scrub(t))
    assert str(other) == "transport error (RemoteProtocolError: peer closed Bearer [REDACTED])"
