"""The live dashboard: standard-library HTTP on 127.0.0.1 over a read-only store.

`GET /` is `index.html` built from the store (same page as the report, `live: true`);
`GET /api/traces?teacher=&dataset=` lists every trace of a cell, `GET /api/trace?id=` returns one
trace's steps and rollouts as JSON. One thread serves requests, so the DuckDB connection is never
shared between threads. Figures are rendered once at start into a temporary directory.
"""

from __future__ import annotations

import json
import tempfile
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from legival_core.reports.build import compute_report
from legival_core.reports.dashboard import dashboard_html, safe_json, trace_details, trace_list
from legival_core.reports.data import ReportConfig
from legival_core.reports.plots import write_plots
from legival_core.store import Store


def make_server(store: Store, port: int = 8765, config: ReportConfig | None = None) -> HTTPServer:
    """The page is `compute_report`'s, the same code path as `legival report` (one dashboard)."""
    config = config or ReportConfig()
    tau, model = config.tau, config.model
    data = compute_report(store, config)
    with tempfile.TemporaryDirectory() as tmp:
        write_plots(data, Path(tmp))
        page = dashboard_html(data, store, live=True, image_dir=Path(tmp)).encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", page)
            elif url.path == "/api/traces":
                rows = trace_list(store, q.get("teacher"), q.get("dataset"))
                self._send(200, "application/json", safe_json(rows).encode("utf-8"))
            elif url.path == "/api/trace" and "id" in q:
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

    return HTTPServer(("127.0.0.1", port), Handler)
