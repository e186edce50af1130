"""A uvicorn server for a browser page, on a socket bound before any work, run on a thread of its own.

Why these choices:
- The socket is bound first (`bind`), so a port in use is `PortInUse` at once, before minutes of
  building a page; port 0 picks a free one, and `url` says which.
- Every connection has `head_timeout_s` to send a whole request head, counted from its connection (or
  from its previous answer): a client that connects and sends nothing, or sends a byte now and then
  (slowloris), is dropped. uvicorn's own keep-alive timer starts only after a first answer and any
  byte resets it, hence `_HeadDeadline`.
- Request heads are bounded (`MAX_INCOMPLETE_HEAD_BYTES` while they arrive, the guard's limit once
  whole), connections and tasks at once too (`MAX_CONNECTIONS`, 503 past it); no access log (a URL
  may carry a study token).
- uvicorn runs on a thread and does not touch the process's signal handlers: the command decides
  what a signal means (`legival serve`: stop, say so, exit 0), and `stop()` ends the server from any
  thread, waiting for answers in flight at most `GRACE_S`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from typing import Any

from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

from legival_core.web.guard import ASGIApp

HEAD_TIMEOUT_S = 30.0
"""Seconds a connection may take to send a request head (before its first request or between two)."""

MAX_INCOMPLETE_HEAD_BYTES = 32 * 1024
"""h11 buffers at most this much of a head that has not ended yet (400 past it); a complete head is
bounded by the guard (`guard.MAX_HEAD_BYTES`, 431)."""

MAX_CONNECTIONS = 128
"""Connections and requests in progress at once; past this, new ones get 503 until some end."""

GRACE_S = 5.0
"""Seconds `stop()` lets requests in flight finish before it cancels them."""

START_TIMEOUT_S = 30.0


class PortInUse(Exception):
    """Another process listens on the port the server was asked to use."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(f"port {port} on {host} is in use")
        self.host, self.port = host, port


class ServerFailed(RuntimeError):
    """The server thread ended with an error (at start, or while serving)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); PortInUse when taken. IPv6 when `host` is one."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.set_inheritable(False)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from e
        raise
    return sock


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (module docstring). The deadline is
    armed when the connection opens and after each answer, and disarmed only once a whole request head
    has arrived (a new request cycle exists), whatever bytes trickle in before."""

    head_timeout_s = HEAD_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None
    _seen_cycle: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._disarm_on_new_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request at once
        if self._disarm_on_new_request():
            return
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _disarm_on_new_request(self) -> bool:
        cycle = self.cycle
        if cycle is not None and cycle is not self._seen_cycle and not cycle.response_complete:
            self._seen_cycle = cycle
            self._cancel()
            return True
        return False

    def _arm(self) -> None:
        self._cancel()
        self._deadline = self.loop.call_later(self.head_timeout_s, self._expire)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


class _Server(Server):
    """uvicorn's server, saying when it accepts connections (`ready`; also set when it ends)."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class LocalServer:
    """`app` served on `sock` by uvicorn on a daemon thread: `start()` returns once it accepts
    connections, `stop()` ends it (idempotent). Use as a context manager."""

    def __init__(self, app: ASGIApp, sock: socket.socket, *, head_timeout_s: float = HEAD_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.sock = sock
        name = sock.getsockname()
        self._address: tuple[str, int] = (str(name[0]), int(name[1]))
        protocol = type("HeadDeadline", (_HeadDeadline,), {"head_timeout_s": head_timeout_s})
        config = Config(app, http=protocol, lifespan="off", access_log=False, log_config=None,
                        h11_max_incomplete_event_size=MAX_INCOMPLETE_HEAD_BYTES, limit_concurrency=max_connections,
                        timeout_keep_alive=int(max(1, min(head_timeout_s, 5))),
                        timeout_graceful_shutdown=int(GRACE_S), server_header=False, proxy_headers=False)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        _quiet_uvicorn_logs()

    @property
    def host(self) -> str:
        return self._address[0]

    @property
    def port(self) -> int:
        return self._address[1]

    @property
    def url(self) -> str:
        host = self.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}/"

    def start(self) -> LocalServer:
        self._thread = threading.Thread(target=self._run, name="legival-web-server", daemon=True)
        self._thread.start()
        self._server.ready.wait(START_TIMEOUT_S)
        if not self._server.started:
            self.stop()
            raise ServerFailed(f"the server did not start: {self._error or 'it took too long'}")
        return self

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self.sock])
        except BaseException as e:  # noqa: BLE001 - handed to the owner (start/wait), never lost
            self._error = e
        finally:
            self._server.ready.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server ends (True) or `timeout` passes (False); ServerFailed when it ended
        with an error."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._error is not None:
            raise ServerFailed(str(self._error) or type(self._error).__name__) from self._error
        return True

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(GRACE_S + 10)
            if self._thread.is_alive():  # a request that ignores cancellation: leave it to the daemon thread
                self._server.force_exit = True
                self._thread.join(5)
        self.sock.close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _quiet_uvicorn_logs() -> None:
    """uvicorn's own log lines stay out of the user's terminal unless they are errors, and then as one
    line (no traceback: the app answers its own errors with 500)."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        log = logging.getLogger(name)
        log.setLevel(logging.ERROR)
        log.propagate = False
        if not any(getattr(h, "_legival", False) for h in log.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(_OneLine("warning: web server: %(message)s"))
            handler._legival = True  # type: ignore[attr-defined]
            log.addHandler(handler)


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return super().format(record).splitlines()[0] if record.getMessage() else ""
