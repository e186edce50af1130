"""Infrastructure that is not there fails fast through the real commands (tasks/infra.py): a Ray cluster
or a Prefect API that does not answer within `execution.connect_timeout_s` (15 s), and a dashboard port
in use, are each one `error:` line naming the address, exit 2, no traceback, well within 20 s, and
nothing written."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests._cli import Ran, legival
from tests.flows._orchestration import write_spec

CLOSED = "127.0.0.1:1"
"""Nothing listens on port 1 (a privileged port no test server takes): connections are refused."""


def assert_error(p: Ran, elapsed: float, *fragments: str) -> str:
    assert elapsed < 20, elapsed
    return p.error(*fragments)


def timed(*args: str | Path) -> tuple[Ran, float]:
    t0 = time.perf_counter()
    ran = legival(*args)
    return ran, time.perf_counter() - t0


@contextmanager
def silent_listener() -> Iterator[int]:
    """A port where a connection is never answered: a listener that accepts nothing, its backlog full,
    so the kernel drops every further connection attempt (as a firewall that drops packets does)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued: list[socket.socket] = []
    try:
        while True:  # fill the backlog: until a connection attempt is no longer completed
            c = socket.socket()
            c.settimeout(0.5)
            queued.append(c)
            try:
                c.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        yield port
    finally:
        for c in queued:
            c.close()
        server.close()


@contextmanager
def prefect_api_at(url: str) -> Iterator[None]:
    """PREFECT_API_URL for the in-process command (over any API the session's harness set)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield


def spec_with(tmp_path: Path, **execution: object) -> Path:
    return write_spec(tmp_path, ["gpt-oss-20b"], execution={"local_cpus": 2, **execution})


@pytest.mark.parametrize("address", [f"ray://{CLOSED}", CLOSED])
def test_run_with_a_ray_cluster_that_is_not_there(tmp_path: Path, address: str) -> None:
    spec = spec_with(tmp_path, ray_address=address)
    ran, elapsed = timed("run", spec)
    assert_error(ran, elapsed, f"Ray cluster at {address} did not answer within 15 s "
                               f"(execution.ray_address in {spec})", "connection refused")
    assert not (tmp_path / "store.duckdb").exists()  # refused before the store is created


def test_run_with_a_ray_cluster_that_never_answers_stops_at_the_timeout(tmp_path: Path) -> None:
    with silent_listener() as port:
        spec = spec_with(tmp_path, ray_address=f"127.0.0.1:{port}", connect_timeout_s=2)
        ran, elapsed = timed("run", spec)
    assert_error(ran, elapsed, f"Ray cluster at 127.0.0.1:{port} did not answer within 2 s", "no answer")
    assert elapsed >= 2


def test_run_with_a_prefect_api_that_is_not_there(tmp_path: Path) -> None:
    spec = spec_with(tmp_path)
    with prefect_api_at(f"http://{CLOSED}/api"):
        ran, elapsed = timed("run", spec)
    assert_error(ran, elapsed, f"Prefect API at http://{CLOSED}/api did not answer within 15 s", "PREFECT_API_URL",
                 "connection refused")
    assert not (tmp_path / "store.duckdb").exists()


def test_add_teacher_deploy_with_a_prefect_api_that_never_answers(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, connect_timeout_s=2)
    before = spec.read_bytes()
    traces = tmp_path / "traces.jsonl"
    with silent_listener() as port, prefect_api_at(f"http://127.0.0.1:{port}/api"):
        ran, elapsed = timed("add-teacher", "new-teacher", "--traces", traces, "--spec", spec,
                             "--prefect-file", tmp_path / "prefect.yaml", "--deploy")
    assert_error(ran, elapsed, f"Prefect API at http://127.0.0.1:{port}/api did not answer within 2 s", "no answer",
                 "nothing was changed")
    assert spec.read_bytes() == before and not (tmp_path / "prefect.yaml").exists()


def test_serve_on_a_port_in_use(tmp_path: Path) -> None:
    trace = tmp_path / "a.jsonl"
    trace.write_text(json.dumps({"model": "t1", "dataset": "gsm8k", "problem_id": "gsm8k-test-7",
                                 "problem": "Tom has 9 apples and buys 9 more. How many?", "gold_answer": "18",
                                 "reasoning": "9 + 9 = 18.", "response": "\\boxed{18}"}) + "\n")
    db = tmp_path / "s.duckdb"
    assert legival("ingest", trace, "--db", db).returncode == 0
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        ran, elapsed = timed("serve", "--db", db, "--port", str(port))
    finally:
        taken.close()
    line = assert_error(ran, elapsed, f"port {port} is in use (choose another with --port)")
    assert line == f"error: port {port} is in use (choose another with --port)"
