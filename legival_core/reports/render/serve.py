"""The live dashboard: standard-library HTTP on 127.0.0.1 over a read-only store.

`GET /` is `index.html` built from the store (same page as the report, `live: true`);
`GET /api/traces?teacher=&dataset=` lists every trace of a cell, `GET /api/trace?id=` returns one
trace's steps, grade and rollouts as JSON.

Each connection is served on its own daemon thread (`ThreadingHTTPServer`) with a socket timeout, so
a client that connects and sends nothing (or stalls mid-request) delays nobody and is dropped after
`timeout` seconds. The port is bound first, so a port in use is refused (`PortInUse`) before any work.
The page and its figures are built once at start; the per-request store reads share
the one DuckDB connection, which is not thread-safe, so they run one at a time under a lock.
"""

from __future__ import annotations

import errno
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from legival_core.reports.compute.build import compute_report
from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.render.bundle import bundle
from legival_core.reports.render.dashboard import dashboard_html, safe_json, trace_details, trace_list
from legival_core.reports.render.paper_plots import write_paper_plots
from legival_core.reports.render.plots import write_plots
from legival_core.runs.diff import changes
from legival_core.store import Store

SOCKET_TIMEOUT_S = 30.0
"""Seconds a connection may stay silent (before or during a request) before the server drops it."""


class DashboardServer(ThreadingHTTPServer):
    """One daemon thread per connection: an open connection never blocks shutdown."""

    daemon_threads = True


class PortInUse(Exception):
    """Another process listens on the port the dashboard was asked to use."""

    def __init__(self, port: int) -> None:
        super().__init__(f"port {port} is in use")
        self.port = port


def make_server(store: Store, port: int = 8765, config: ReportConfig | None = None,
                timeout: float = SOCKET_TIMEOUT_S) -> DashboardServer:
    """The page is `compute_report`'s, the same code path as `legival report` (one dashboard). The port
    is bound before the page is built: `PortInUse` comes at once, not after the report."""
    try:
        server = DashboardServer(("127.0.0.1", port), BaseHTTPRequestHandler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(port) from e
        raise
    try:
        server.RequestHandlerClass = _handler(store, config or ReportConfig(), timeout)
    except BaseException:
        server.server_close()
        raise
    return server


def _handler(store: Store, config: ReportConfig, timeout: float) -> type[BaseHTTPRequestHandler]:
    """The request handler over the page built now and the store read per request."""
    tau, model = config.tau, config.model
    report = bundle(compute_report(store, config), store, changes(store))
    with tempfile.TemporaryDirectory() as tmp:
        write_plots(report.data, Path(tmp))
        write_paper_plots(report, Path(tmp))
        page = dashboard_html(report, store, live=True, image_dir=Path(tmp)).encode("utf-8")
    store_lock = threading.Lock()
    socket_timeout = timeout

    class Handler(BaseHTTPRequestHandler):
        timeout = socket_timeout  # StreamRequestHandler puts it on each connection's socket

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                self._get()
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                self.close_connection = True
            except Exception as e:  # a failed store read answers 500; the server keeps serving
                self._send(500, "application/json", json.dumps({"error": type(e).__name__}).encode())

        def _get(self) -> None:
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", page)
            elif url.path == "/api/traces":
                with store_lock:
                    rows = trace_list(store, q.get("teacher"), q.get("dataset"))
                self._send(200, "application/json", safe_json(rows).encode("utf-8"))
            elif url.path == "/api/trace" and "id" in q:
                with store_lock:
                    found = trace_details(store, [q["id"]], tau, model).get(q["id"])
                if found is None:
                    self._send(404, "application/json", json.dumps({"error": "no such trace"}).encode())
                else:
                    self._send(200, "application/json", safe_json(found).encode("utf-8"))
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found")

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    return Handler
