"""The live dashboard: a Starlette app on 127.0.0.1 over a read-only store.

`GET /` is `index.html` built from the store (same page as the report, `live: true`);
`GET /api/traces?teacher=&dataset=` lists every trace of a cell, `GET /api/trace?id=` returns one
trace's steps, grade, rollout markers and step events as JSON, continuations whole (the static file
caps them: it embeds many traces, the API sends one). Nothing else is answered (404; 405 for another
method).

Served by `legival_core.web`: the guard answers only requests whose `Host` names this server (DNS
rebinding: a lab's unreleased traces must not be readable by any page the user visits), uvicorn on a
socket bound before the page is built (a port in use is refused before any work), a deadline on every
request head (a silent or trickling client is dropped; it never delays others: connections are served
concurrently). The page and its figures are built once at start; the per-request store reads share
the one DuckDB connection, which is not thread-safe, so they run one at a time under a lock.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from legival_core.reports.compute.build import compute_report
from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.render.bundle import bundle
from legival_core.reports.render.dashboard import dashboard_html, safe_json, trace_details, trace_list
from legival_core.reports.render.early_plot import write_early_plot
from legival_core.reports.render.paper_plots import write_paper_plots
from legival_core.reports.render.plots import write_plots
from legival_core.runs.diff import changes
from legival_core.store import Store
from legival_core.web.guard import AllowedHosts, HostGuard, Refused
from legival_core.web.server import HEAD_TIMEOUT_S, LocalServer, PortInUse, bind

__all__ = ["PortInUse", "dashboard_app", "make_server"]


def make_server(store: Store, port: int = 8765, config: ReportConfig | None = None, *, host: str = "127.0.0.1",
                allow_hosts: Iterable[str] = (), head_timeout_s: float = HEAD_TIMEOUT_S,
                on_refused: Refused | None = None) -> LocalServer:
    """The dashboard of `store` on (host, port), not yet started. The port is bound before the page is
    built (`compute_report`, the same code path as `legival report`): `PortInUse` comes at once; an
    `allow_hosts` entry that is not a host name is `BadHostName`, before the port is bound."""
    allowed = AllowedHosts.for_server(host, allow_hosts)
    sock = bind(host, port)
    try:
        app = HostGuard(dashboard_app(store, config or ReportConfig()), allowed, on_refused=on_refused)
        return LocalServer(app, sock, head_timeout_s=head_timeout_s)
    except BaseException:
        sock.close()
        raise


def dashboard_app(store: Store, config: ReportConfig) -> Any:
    """The Starlette app over the page built now and the store read per request."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    tau, model = config.tau, config.model
    report = bundle(compute_report(store, config), store, changes(store))
    with tempfile.TemporaryDirectory() as tmp:
        write_plots(report.data, Path(tmp))
        write_early_plot(report.data, Path(tmp))
        write_paper_plots(report, Path(tmp))
        page = dashboard_html(report, store, live=True, image_dir=Path(tmp)).encode("utf-8")
    store_lock = threading.Lock()

    def as_json(code: int, payload: Any) -> Response:
        return Response(safe_json(payload), status_code=code, media_type="application/json")

    def answered(read: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """A failed store read answers 500 with the error's type; the server keeps serving."""
        def endpoint(request: Request) -> Response:
            try:
                return read(request)
            except Exception as e:  # noqa: BLE001 - the answer says what failed, nothing leaks
                return Response(json.dumps({"error": type(e).__name__}), status_code=500,
                                media_type="application/json")
        return endpoint

    def index(_request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8")

    def traces(request: Request) -> Response:
        q = request.query_params
        with store_lock:
            rows = trace_list(store, q.get("teacher"), q.get("dataset"))
        return as_json(200, rows)

    def trace(request: Request) -> Response:
        tid = request.query_params.get("id")
        if tid is None:
            return as_json(400, {"error": "give a trace id: /api/trace?id=..."})
        with store_lock:
            found = trace_details(store, [tid], tau, model, max_chars=None).get(tid)
        return as_json(404, {"error": "no such trace"}) if found is None else as_json(200, found)

    return Starlette(routes=[
        Route("/", answered(index), methods=["GET", "HEAD"]),
        Route("/index.html", answered(index), methods=["GET", "HEAD"]),
        Route("/api/traces", answered(traces), methods=["GET", "HEAD"]),
        Route("/api/trace", answered(trace), methods=["GET", "HEAD"]),
    ])
