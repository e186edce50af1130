"""`legival serve` answers only requests addressed to itself (issue 38 item 1: DNS rebinding).

A real `legival serve` on a free port, asked as an attacker's page would ask it (a `Host` naming the
attacker's domain, which is what a rebinding browser sends), on every route the dashboard app has
(listed from the app itself, so a new route is checked too) and on one it does not have; state-changing
methods without the server's own `Origin`; oversized requests. Then the signals that stop it.
The rules as functions: tests/core/web/test_guard.py; in a real browser: test_dashboard_browser.py.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from legival_core.reports.compute.data import ReportConfig
from legival_core.store import Store
from tests._cli import legival
from tests.conftest import REPO
from tests.synthetic import fill_synthetic

ATTACKER_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost.evil.example",
                  "[::2]:{port}", "127.0.0.2:{port}", "", "dash.internal.evil:{port}"]
OWN_HOSTS = ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "localhost:9000",
             "dash.internal:{port}"]
UNSAFE = ["POST", "PUT", "DELETE", "PATCH"]


@pytest.fixture(scope="module")
def db() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="legival-guard-") as tmp:
        path = Path(tmp) / "s.duckdb"
        with Store(path) as store:
            fill_synthetic(store, teachers=("a", "b"), traces_per_cell=3, seed=2)
        yield path


class Served:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port

    def ask(self, method: str, path: str, host: str | None, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                conn.putheader("Host", host.format(port=self.port))
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            if body is not None and "Content-Length" not in (headers or {}):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def served(db: Path) -> Iterator[Served]:
    """`legival serve` as a user starts it, with one extra allowed name; stopped by a test below (or
    here, when a test failed first)."""
    proc = subprocess.Popen([sys.executable, "-m", "legival", "serve", "--db", str(db), "--port", "0", "--resamples",
                             "0", "--allow-host", "dash.internal"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, start_new_session=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else url
    yield Served(proc, int(url.rstrip("/").rsplit(":", 1)[1]))
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def routes(db: Path, served: Served) -> list[str]:
    """Every path the dashboard app answers, read from the app, with a real query where it needs one."""
    from legival_core.reports.render.serve import dashboard_app

    with Store(db, read_only=True) as store:
        app = dashboard_app(store, ReportConfig(resamples=0))
    status, body = served.ask("GET", "/api/traces?teacher=a&dataset=gsm8k", "localhost")
    assert status == 200, body[:300]
    tid = json.loads(body)[0]["trace_id"]
    queries = {"/api/traces": "?teacher=a&dataset=gsm8k", "/api/trace": f"?id={quote(tid)}"}
    paths = [r.path for r in app.routes]
    assert {"/", "/api/traces", "/api/trace"} <= set(paths)
    return [p + queries.get(p, "") for p in paths] + ["/no-such-page"]


def test_every_route_refuses_a_host_that_is_not_the_servers(served: Served, routes: list[str]) -> None:
    for path in routes:
        for host in ATTACKER_HOSTS:
            status, body = served.ask("GET", path, host)
            assert status == 400, (path, host, status)
            assert b"refused" in body and b"trace" not in body.replace(b"host names", b""), (path, host, body[:200])
            assert b"evil" not in body  # nothing of the request is echoed


def test_every_route_answers_its_own_names(served: Served, routes: list[str]) -> None:
    for path in routes:
        for host in OWN_HOSTS:
            status, body = served.ask("GET", path, host)
            assert status == (404 if path == "/no-such-page" else 200), (path, host, status, body[:200])
    status, body = served.ask("GET", routes[[r.split("?")[0] for r in routes].index("/api/traces")], "localhost")
    assert {r["teacher"] for r in json.loads(body)} == {"a"}


def test_a_request_without_host_is_refused(served: Served) -> None:
    """HTTP/1.0 allows it; no browser sends it; the guard refuses it like a foreign one."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as s:
        s.sendall(b"GET /api/traces?teacher=a&dataset=gsm8k HTTP/1.0\r\n\r\n")
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert reply.split(b"\r\n", 1)[0].endswith(b"400 Bad Request") and b"trace_id" not in reply


def test_a_state_changing_request_needs_the_servers_own_origin(served: Served, routes: list[str]) -> None:
    """A browser sends `Host` with the port it connects to; the page's `Origin` names the same host and
    port. Another port of this machine is another site (any local web app)."""
    own = {"Origin": f"http://localhost:{served.port}"}
    host = "localhost:{port}"
    for path in routes:
        for method in UNSAFE:
            assert served.ask(method, path, host, body=b"x")[0] == 403, (method, path)
            for origin in ("http://evil.example", f"http://evil.example:{served.port}", "null",
                           f"http://localhost:{served.port + 1}", f"http://127.0.0.1:{served.port}"):
                assert served.ask(method, path, host, {"Origin": origin}, b"x")[0] == 403, (method, path, origin)
            # the guard lets it through; the dashboard has no state to change
            assert served.ask(method, path, host, own, b"x")[0] in (404, 405), (method, path)


def test_oversized_requests_are_refused(served: Served) -> None:
    own = {"Origin": f"http://localhost:{served.port}"}
    status, _ = served.ask("POST", "/api/traces", "localhost:{port}", {**own, "Content-Length": str(50 << 20)}, b"")
    assert status == 413
    status, _ = served.ask("GET", "/", "localhost", {"X-Big": "a" * 40_000})
    assert status in (400, 431)
    assert served.ask("GET", "/", "localhost")[0] == 200  # still serving


def test_bad_allow_host_is_one_error_line(db: Path) -> None:
    for bad in ("http://dash.internal", "dash.internal:80", "a b", ""):
        r = legival("serve", "--db", str(db), "--port", "0", "--allow-host", bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith("error: --allow-host") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_sigterm_stops_the_server_with_its_summary(served: Served) -> None:
    """Last in the module: stops the shared server. Refusals are counted and each host named once (the
    tests above refuse many more when they ran first; these make the test stand alone when they did not,
    as under plain `-n 2`, which splits the module)."""
    for _ in range(51):
        assert served.ask("GET", "/", "evil.example")[0] == 400
    served.proc.send_signal(signal.SIGTERM)
    out, err = served.proc.communicate(timeout=30)
    assert served.proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert summary["command"] == "serve" and summary["stopped_by"] == "SIGTERM" and summary["refused_requests"] > 50
    assert err.count("refused a request with host 'evil.example'") == 1, err
    assert sum(line.startswith("warning: refused") for line in err.splitlines()) <= 5, err
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", served.port), timeout=5).close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_and_a_closed_terminal_stop_it_the_same_way(db: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "legival", "serve", "--db", str(db), "--port", "0", "--resamples",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["stopped_by"] == sig.name
