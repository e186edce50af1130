"""The guard's rules as functions (legival_core/web/guard.py): which `Host` and `Origin` values name the
server, for every shape an attacker or a proxy could send. The servers that use the guard are tested
through their commands (tests/core/reports/render/test_serve_guard.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from legival_core.web.guard import (
    AllowedHosts,
    BadHostName,
    HostGuard,
    host_name,
    split_host,
)

ALLOWED = AllowedHosts.for_server("127.0.0.1", ["dash.internal"])

GOOD_HOSTS = [
    "127.0.0.1", "127.0.0.1:8765", "localhost", "localhost:8765", "LOCALHOST:1", "[::1]", "[::1]:8765",
    "[0:0:0:0:0:0:0:1]:80", "localhost.:9000", "localhost\t", "dash.internal", "Dash.Internal:443", " localhost:8765 ",
]

BAD_HOSTS = [
    "", " ", "evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.evil.example:8765",
    "evil.localhost", "127.0.0.2", "127.1", "2130706433", "0x7f.1", "[::2]:8765", "::1", "::1:8765", "[::1",
    "[::1]x", "[::1]:", "localhost:", "localhost:0", "localhost:65536", "localhost:99999", "localhost:-1",
    "localhost:8765:1", "localhost:a", "localhost:８７", "127.0.0.1@evil.example", "evil.example@127.0.0.1",
    "127.0.0.1/evil", "localhost\x00", "localhost evil", "local host", "dash.internal.evil",
    "http://localhost", "*", "%6cocalhost", "ｌocalhost", "localhost\u200b", "\x00ambiguous",
    "0.0.0.0", "[::]:8765", "a" * 300,
]


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_names_of_the_server_pass(host: str) -> None:
    assert ALLOWED.host_ok(host)


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_any_other_host_is_refused(host: str) -> None:
    assert not ALLOWED.host_ok(host)


def test_no_host_is_refused() -> None:
    assert not ALLOWED.host_ok(None)


def test_a_wildcard_bind_names_no_host_but_a_specific_address_does() -> None:
    assert not AllowedHosts.for_server("0.0.0.0").host_ok("0.0.0.0:8765")
    assert not AllowedHosts.for_server("::").host_ok("[::]:8765")
    assert AllowedHosts.for_server("10.1.2.3").host_ok("10.1.2.3:8765")
    assert not AllowedHosts.for_server("10.1.2.3").host_ok("10.1.2.4:8765")


@pytest.mark.parametrize("value", ["http://x", "x:80", "x/y", "", " ", "a b", "-x", "x..y", "ünï", "[::1", "*.x"])
def test_an_allowed_name_must_be_a_name(value: str) -> None:
    with pytest.raises(BadHostName):
        host_name(value)


def test_split_host_round_trips_every_port_and_name_shape() -> None:
    for name, port in itertools.product(["localhost", "127.0.0.1", "[::1]", "a-b.c"], [None, 1, 80, 65535]):
        text = name if port is None else f"{name}:{port}"
        assert split_host(text) == (name, port)


@pytest.mark.parametrize("origin,host,ok", [
    ("http://127.0.0.1:8765", "127.0.0.1:8765", True), ("http://localhost:8765", "localhost:8765", True),
    ("https://localhost", "localhost", True), ("http://localhost:80", "localhost", True),
    ("https://localhost:443", "localhost", True), ("http://[::1]:8765", "[::1]:8765", True),
    ("http://dash.internal:80", "dash.internal", True), ("https://dash.internal", "dash.internal", True),
    ("HTTP://LOCALHOST:8765", "localhost:8765", True),
    # the same machine on another port is another site (any local web app), another allowed name too
    ("http://127.0.0.1:9999", "127.0.0.1:8765", False), ("http://localhost:1", "localhost:8765", False),
    ("http://localhost:8765", "127.0.0.1:8765", False), ("https://localhost", "localhost:8765", False),
    ("http://localhost", "localhost:443", False), ("https://localhost", "localhost:80", False),
    ("http://127.0.0.1:8765", "evil.example:8765", False), ("http://127.0.0.1:8765", None, False),
    ("null", "localhost:8765", False), ("", "localhost:8765", False), (None, "localhost:8765", False),
    ("http://evil.example:8765", "localhost:8765", False), ("http://localhost.evil.example", "localhost", False),
    ("file://", "localhost", False), ("ftp://localhost", "localhost", False),
    ("http://localhost:8765/", "localhost:8765", False), ("http://user@localhost:8765", "localhost:8765", False),
    ("http://localhost:99999", "localhost:99999", False), ("http://localhost:8765?x", "localhost:8765", False),
    ("javascript:alert(1)", "localhost", False), ("http://127.0.0.1:8765 http://evil", "127.0.0.1:8765", False),
])
def test_origin_must_be_the_requests_own_host_and_port(origin: str | None, host: str | None, ok: bool) -> None:
    assert ALLOWED.origin_ok(origin, host) is ok


# ------------------------------------------------------------------------------------- the middleware


def _call(method: str, headers: list[tuple[bytes, bytes]], body: list[bytes]) -> tuple[int, bool]:
    """One request through the guard; (status, whether the app was reached)."""
    reached: list[bytes] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        data = b""
        if method not in ("GET", "HEAD"):
            while True:
                m = await receive()
                data += m.get("body", b"")
                if not m.get("more_body"):
                    break
        reached.append(data)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    chunks = [{"type": "http.request", "body": b, "more_body": i < len(body) - 1} for i, b in enumerate(body)] or [
        {"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    guard = HostGuard(app, ALLOWED, max_body_bytes=10)
    asyncio.run(guard({"type": "http", "method": method, "headers": headers}, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    names = {k for k, _ in start["headers"]}
    assert {b"x-content-type-options", b"cache-control", b"x-frame-options"} <= names
    return start["status"], bool(reached)


def test_the_middleware_refuses_before_the_app_and_passes_the_body_it_read() -> None:
    host = [(b"host", b"localhost:1")]
    own = [(b"origin", b"http://localhost:1")]
    assert _call("GET", host, []) == (200, True)
    assert _call("GET", [(b"host", b"evil.example:1")], []) == (400, False)
    assert _call("GET", [], []) == (400, False)
    assert _call("GET", [*host, (b"host", b"evil.example")], []) == (400, False)  # two Hosts: ambiguous
    assert _call("POST", host, [b"x"]) == (403, False)  # no Origin
    assert _call("POST", [*host, (b"origin", b"http://evil.example")], [b"x"]) == (403, False)
    assert _call("POST", [*host, *own], [b"abc", b"def"]) == (200, True)
    assert _call("POST", [*host, *own, (b"content-length", b"11")], [b"x" * 11]) == (413, False)
    assert _call("POST", [*host, *own, (b"content-length", b"-1")], [b"x"]) == (413, False)
    assert _call("POST", [*host, *own], [b"x" * 6, b"x" * 6]) == (413, False)  # chunked, no length
    assert _call("DELETE", [*host, (b"origin", b"null")], []) == (403, False)
