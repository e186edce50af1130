"""The guard in front of every server Legi-Val starts for a browser (an ASGI middleware).

Why: a server on 127.0.0.1 is not private. Any web page the user visits can make the browser send
requests to it, and through DNS rebinding (the attacker's name resolving to 127.0.0.1) it can even read
the answers: the browser thinks it talks to `evil.example:PORT`. The one thing such a request cannot
fake is its `Host` header, which carries the attacker's name. So:

- **Host**: a request is answered only when its `Host` names the server as the user reaches it: a
  loopback name (`127.0.0.1`, `localhost`, `[::1]`), the address it is bound to, or a name the user
  allowed explicitly (`legival serve --allow-host NAME`, e.g. a reverse proxy's). Any port is accepted:
  the port a browser sends is the one it connected to, which an SSH tunnel (`ssh -L 9000:...`)
  changes, while the name is what rebinding changes. No `Host` at all (HTTP/1.0) is refused too.
- **Origin**: a request that changes state (any method but GET, HEAD and OPTIONS) must carry an
  `Origin` of the request's own host and port (`http://` or `https://`): a cross-site form or `fetch`
  carries the attacker's origin (CSRF), every browser sends `Origin` on such requests, and another port
  of this machine is another site (any local web app).
  An API server for programs (`api=True`: the reward server) also takes a state-changing request
  with NO `Origin` (a program sends none) when its body is declared `application/json`: a cross-site
  form cannot send that type, and a cross-site `fetch` of it needs a CORS preflight, which is never
  answered; a foreign `Origin` is refused there too.
- **Size**: a request line and headers over `max_head_bytes` are refused (431: h11 bounds only a head
  that arrives in pieces); a declared body over `max_body_bytes` is refused (413) before it is read; a
  state-changing request's body is read whole here (bounded, within `body_timeout_s`) and handed on.
- **Headers** on every answer: `nosniff`, `no-store`, no framing, a referrer only to the same origin (`no-referrer` would make a browser send `Origin: null` on a form POST, which the Origin check refuses), same-origin resources.

A refused request gets a short plain-text answer that echoes nothing of the request; `on_refused`
(e.g. the command's one warning line per new value) hears what was refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""Names that reach this machine only: always allowed."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods a browser may send cross-site without the page reading the answer: no state may change."""

DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port an `Origin` or a `Host` without one means (RFC 6454: the scheme's default)."""

MAX_HEAD_BYTES = 16 * 1024
"""A request line plus headers larger than this is refused (431)."""

MAX_BODY_BYTES = 1 << 20
"""A request body above this is refused (413): the servers take small forms and JSON, nothing more."""

BODY_TIMEOUT_S = 30.0
"""Seconds a client may take to send a state-changing request's body (a stalled upload is dropped)."""

SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)

_NAME = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$")


class BadHostName(ValueError):
    """A name given to `--allow-host` (or a bind address) that is not a host name or an IP address."""


def host_name(value: str) -> str:
    """The canonical form of a host name or IP address as a `Host` header carries it (lower case, an
    IPv6 address in brackets); BadHostName when it is neither (a scheme, a port, a path, spaces)."""
    text = value.strip().lower()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    if text.endswith("."):
        text = text[:-1]
    if not text or len(text) > 253 or not _NAME.match(text):
        raise BadHostName(f"{value!r} is not a host name or an IP address (give the name alone: no scheme, "
                          "port or path)")
    return text


def split_host(header: str) -> tuple[str, int | None] | None:
    """`Host` (`name`, `name:port`, `[v6]:port`) as (canonical name, port), None when malformed."""
    text = header.strip()
    port_text: str | None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        name, port_text = text.split(":")
    elif ":" in text:
        return None  # a bare IPv6 address is not a valid Host
    else:
        name, port_text = text, None
    if port_text is not None and not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        return None  # "name:" with an empty or bad port
    try:
        return host_name(name), int(port_text) if port_text else None
    except BadHostName:
        return None


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a server answers to (canonical forms, `host_name`)."""

    names: frozenset[str]

    @classmethod
    def for_server(cls, bound: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """The loopback names, the bound address (unless it is a wildcard: 0.0.0.0 names no host) and
        the user's `extra` names (BadHostName for one that is not a name)."""
        names = {host_name(n) for n in LOOPBACK_NAMES}
        b = host_name(bound)
        if b not in ("0.0.0.0", "[::]"):
            names.add(b)
        names.update(host_name(n) for n in extra)
        return cls(frozenset(names))

    def host_ok(self, header: str | None) -> bool:
        parsed = split_host(header) if header is not None else None
        return parsed is not None and parsed[0] in self.names

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """An `Origin` header (`scheme://host[:port]`) of the same host and port as the request's allowed
        `Host`: the page that sends it was served by this server. Another port of the same machine is
        another site (any local web app); `null` and anything with a path, user or query is refused. The
        scheme is http or https (a TLS reverse proxy in front); a port left out is the scheme's default,
        as a Host left without one is."""
        if not origin or not self.host_ok(host):
            return False
        try:
            u = urlsplit(origin.strip())
            port = u.port
        except ValueError:
            return False
        if u.scheme not in ("http", "https") or u.path or u.query or u.fragment or u.username is not None:
            return False
        netloc = u.netloc.lower()
        name = netloc if port is None else netloc.rsplit(":", 1)[0]
        parsed, own = split_host(name), split_host(host or "")
        if parsed is None or own is None or parsed[0] != own[0]:
            return False
        default = DEFAULT_PORTS[u.scheme]
        return (port if port is not None else default) == (own[1] if own[1] is not None else default)


Refused = Callable[[str, str], None]
"""`on_refused(what, value)`: what = "host" | "origin" | "size", value = the refused header's text."""


class HostGuard:
    """The ASGI middleware of the module docstring around `app`."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts, *, max_body_bytes: int = MAX_BODY_BYTES,
                 max_head_bytes: int = MAX_HEAD_BYTES, body_timeout_s: float = BODY_TIMEOUT_S,
                 on_refused: Refused | None = None, api: bool = False) -> None:
        self.app, self.allowed, self.api = app, allowed, api
        self.max_body_bytes, self.max_head_bytes, self.body_timeout_s = max_body_bytes, max_head_bytes, body_timeout_s
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets: nothing we serve uses them
            await _refuse(send, 404, "not found")
            return
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + sum(
            len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
        if head > self.max_head_bytes:
            self._tell("size", f"{head} bytes of request head")
            await _refuse(send, 431, f"refused: a request line and headers may hold at most {self.max_head_bytes} bytes")
            return
        headers = _headers(scope)
        host = headers.get("host")
        if not self.allowed.host_ok(host):
            self._tell("host", host or "")
            await _refuse(send, 400, "refused: this server answers only to the host names it was started for "
                                     "(127.0.0.1, localhost, or a name given with --allow-host)")
            return
        method = scope.get("method", "GET").upper()
        if method not in SAFE_METHODS and not self.allowed.origin_ok(headers.get("origin"), host) and not (
                self.api and "origin" not in headers and _json_body(headers)):
            self._tell("origin", headers.get("origin") or "(none)")
            await _refuse(send, 403, "refused: a request that changes state must come from this server's own pages")
            return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            self._tell("size", declared)
            await _refuse(send, 413, f"refused: a request body may hold at most {self.max_body_bytes} bytes")
            return
        guarded_send = _with_headers(send)
        if method in SAFE_METHODS:
            await self.app(scope, receive, guarded_send)
            return
        body = await self._read_body(receive, send)
        if body is None:
            return
        await self.app(scope, _replay(body, receive), guarded_send)

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body (bounded in size and time), or None once the refusal is sent."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        self._tell("size", str(size))
                        await _refuse(send, 413, f"refused: a request body may hold at most {self.max_body_bytes} bytes")
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            await _refuse(send, 408, "refused: the request body did not arrive in time")
            return None

    def _tell(self, what: str, value: str) -> None:
        if self.on_refused is not None:
            self.on_refused(what, value)


def _json_body(headers: dict[str, str]) -> bool:
    """The body is declared JSON (`application/json`, parameters allowed)."""
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (latin-1, as HTTP carries them); a repeated `Host` or
    `Origin` makes the value ambiguous, so it becomes one the checks refuse."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        out[name] = "\x00ambiguous" if name in out and name in ("host", "origin", "content-length") else value
    return out


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            have = {k.lower() for k, _ in message.get("headers", ())}
            message["headers"] = [*message.get("headers", ()), *(h for h in SECURITY_HEADERS if h[0] not in have)]
        await send(message)

    return sending


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
