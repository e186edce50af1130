"""`legival serve` as a server: concurrent, with a deadline on request heads, store reads serialized.

The real command runs as a subprocess on a free port (`serving`, also used by the browser test);
the head-deadline and lock checks use `make_server` in-process with a short timeout. The guard
(Host, Origin, sizes) is tested in test_serve_guard.py.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from legival_core.reports.compute.data import ReportConfig
from legival_core.store import Store
from tests.conftest import REPO
from tests.synthetic import fill_synthetic


@contextmanager
def serving(db: Path, *args: str, start_timeout: float = 300) -> Iterator[str]:
    """`legival serve --db DB --port 0 ARGS` as a subprocess; yields its base URL (the line it prints
    on stdout once the page is built) and stops it afterwards."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "legival", "serve", "--db", str(db), "--port", "0", *args],
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline() if proc.stdout else ""), daemon=True).start()
        try:
            try:
                url = lines.get(timeout=start_timeout).strip()
            except queue.Empty:
                url = ""
            if not url.startswith("http://127.0.0.1:"):
                log.seek(0)
                pytest.fail(f"legival serve did not start (printed {url!r}): {log.read()[-3000:]}")
            yield url.rstrip("/")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def small_db() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="legival-serve-") as tmp:
        db = Path(tmp) / "s.duckdb"
        with Store(db) as store:
            fill_synthetic(store, teachers=("a", "b", "c"), traces_per_cell=6, seed=1)
        yield db


def _get(url: str, timeout: float = 15) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def test_two_clients_are_served_while_a_third_holds_an_idle_connection(small_db: Path) -> None:
    with serving(small_db, "--resamples", "0") as base:
        host, port = urllib.parse.urlparse(base).hostname, urllib.parse.urlparse(base).port
        assert host and port
        idle = socket.create_connection((host, port), timeout=30)  # connects, never sends a byte
        stalled = socket.create_connection((host, port), timeout=30)  # stops in the middle of its request
        stalled.sendall(b"GET /api/traces?teacher=a&dataset=math HTTP/1.0\r\n")
        try:
            results: dict[str, tuple[int, bytes, float]] = {}
            errors: list[BaseException] = []
            barrier = threading.Barrier(2)

            def client(name: str, path: str) -> None:
                try:
                    barrier.wait(timeout=10)
                    t0 = time.monotonic()
                    status, body = _get(base + path, timeout=10)
                    results[name] = (status, body, time.monotonic() - t0)
                except BaseException as e:  # reported below
                    errors.append(e)

            threads = [threading.Thread(target=client, args=("page", "/")),
                       threading.Thread(target=client, args=("list", "/api/traces?teacher=b&dataset=gsm8k"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert not errors, errors
            assert results["page"][0] == 200 and b'"live":true' in results["page"][1]
            rows = json.loads(results["list"][1])
            assert results["list"][0] == 200 and len(rows) == 6 and {r["teacher"] for r in rows} == {"b"}
            assert max(r[2] for r in results.values()) < 10
            # the stalled client was never in anyone's way, and is answered once it finishes
            stalled.sendall(f"Host: 127.0.0.1:{port}\r\n\r\n".encode())
            reply = b""
            while chunk := stalled.recv(65536):
                reply += chunk
            assert reply.split(b"\r\n", 1)[0].endswith(b" 200 OK") and b'"teacher":"a"' in reply
        finally:
            idle.close()
            stalled.close()


@pytest.fixture
def in_process(small_db: Path) -> Iterator[str]:
    from legival_core.reports.render.serve import make_server

    with Store(small_db, read_only=True) as store, \
            make_server(store, port=0, config=ReportConfig(resamples=0), head_timeout_s=1.0) as server:
        yield server.url.rstrip("/")


def test_an_idle_connection_is_dropped_after_the_head_deadline(in_process: str) -> None:
    port = urllib.parse.urlparse(in_process).port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=20) as idle:
        t0 = time.monotonic()
        assert idle.recv(1) == b""  # the server closed it
        assert time.monotonic() - t0 < 10
    assert _get(in_process + "/")[0] == 200


def test_a_client_trickling_its_request_head_is_dropped_at_the_deadline(in_process: str) -> None:
    """Slowloris: a byte of the head now and then never completes a request; each byte must not
    restart the clock (uvicorn's own keep-alive timer restarts on any byte)."""
    port = urllib.parse.urlparse(in_process).port
    assert port
    head = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as slow:
        t0 = time.monotonic()
        closed = False
        for b in head + b"a" * 200:
            try:
                slow.sendall(bytes([b]))
            except OSError:  # reset by the server: dropped
                closed = True
                break
            slow.settimeout(0.2)
            try:
                if slow.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        assert closed, "the server kept a connection whose head never completed"
        assert time.monotonic() - t0 < 10
    assert _get(in_process + "/")[0] == 200


def test_keep_alive_then_idle_is_dropped_too(in_process: str) -> None:
    """After one answer on a kept-alive connection, the next head has the same deadline."""
    port = urllib.parse.urlparse(in_process).port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(f"GET /api/traces?teacher=a&dataset=math HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        first = conn.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        while conn.recv(65536):  # the rest of the answer, then the close
            pass
        assert time.monotonic() - t0 < 10


def test_concurrent_store_reads_are_serialized(in_process: str) -> None:
    """Many requests at once through the one DuckDB connection: every answer equals the one alone."""
    rows = json.loads(_get(in_process + "/api/traces?teacher=c&dataset=math")[1])
    ids = [r["trace_id"] for r in rows]
    alone = {tid: json.loads(_get(in_process + "/api/trace?id=" + urllib.parse.quote(tid))[1]) for tid in ids}
    got: dict[tuple[int, str], object] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for tid in ids:
                got[(i, tid)] = json.loads(_get(in_process + "/api/trace?id=" + urllib.parse.quote(tid))[1])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(got) == 8 * len(ids)
    assert all(v == alone[tid] for (_i, tid), v in got.items())
    first = alone[ids[0]]
    assert isinstance(first, dict) and set(first["grade"]) >= {"grader", "extracted", "correct", "status"}
