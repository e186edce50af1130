"""`legival study serve` as a real process: 30 participants answering at once over HTTP (a bounded
thread pool on loopback), `kill -9` of the server half-way, a restart: every acknowledged answer is
stored exactly once and every participant resumes where they were and finishes; SIGTERM ends it with
exit 0 and the closing JSON; tokens appear on standard output only. And the refusals, in-process."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.links import key_path
from tests._cli import legival
from tests.conftest import REPO
from tests.core.study.server_store import STUDY, Served, make_served_study

PARTICIPANTS = 30
START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="legival-study-serve-") as tmp:
        yield make_served_study(Path(tmp) / "s.duckdb", participants=PARTICIPANTS, per_participant=4, attention=1)


@dataclass
class Running:
    proc: subprocess.Popen[str]
    stderr: IO[str]
    links: dict[str, str]
    port: int

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=60)
        self.stderr.seek(0)
        return self.proc.returncode, out, self.stderr.read()


def start(db: Path, *extra: str) -> Running:
    """`legival study serve --port 0`; returns once it printed every link (the admin's is last)."""
    err = tempfile.NamedTemporaryFile(mode="w+", prefix="study-serve-err-")  # noqa: SIM115 - closed by the test
    proc = subprocess.Popen([sys.executable, "-m", "legival", "study", "serve", "--db", str(db), "--name", STUDY,
                             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, ""):
            lines.put(line)
            if line.startswith("admin  "):
                return
        lines.put("")
    threading.Thread(target=read, daemon=True).start()
    links: dict[str, str] = {}
    while True:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = ""
        if not line:
            proc.kill()
            proc.wait(30)
            err.seek(0)
            pytest.fail(f"study serve did not start: {err.read()[-3000:]}")
        code, url = line.split()
        links[code] = url
        if code == "admin":
            break
    port = int(re.match(r"http://[^/]+:(\d+)/", links["admin"]).group(1))  # type: ignore[union-attr]
    return Running(proc, err, links, port)


@dataclass
class Shared:
    port: int
    restarted: threading.Event = field(default_factory=threading.Event)
    half: threading.Event = field(default_factory=threading.Event)
    acked: int = 0
    kill_after: int = 0
    pause_after: int | None = None
    """After this many acknowledged answers, participants wait for `resume` (a report that ran meanwhile)."""
    resume: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: list[float] = field(default_factory=list)

    def ack(self) -> None:
        with self.lock:
            self.acked += 1
            if self.acked >= self.kill_after:
                self.half.set()

    def wait_if_paused(self) -> None:
        with self.lock:
            paused = self.pause_after is not None and self.acked >= self.pause_after
        if paused and self.resume is not None:
            assert self.resume.wait(600), "the pause was never lifted"


def request(shared: Shared, method: str, path: str, body: str | None = None) -> tuple[int, str]:
    port = shared.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"content-type": "application/x-www-form-urlencoded", "origin": f"http://127.0.0.1:{port}"} if body else {}
    t0 = time.perf_counter()
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        text = r.read().decode()
    finally:
        conn.close()
    with shared.lock:
        shared.latencies.append(time.perf_counter() - t0)
    return r.status, text


def hidden(page: str, name: str) -> str:
    return re.search(rf'name="{name}" value="([^"]*)"', page).group(1)  # type: ignore[union-attr]


ANSWER_GOLD: dict[tuple[str, int], str] = {}
"""(code, position) -> the gold of an attention check (filled by the test from its study): a participant
who passes them is not excluded, so the report counts every answer."""


def answer_of(code: str, position: int) -> str:
    return ANSWER_GOLD.get((code, position), f"{code} answers {position} <b>&amp;</b>")


@dataclass
class Result:
    code: str
    acked: list[int]
    """Positions whose answer the server acknowledged (303)."""
    resumed_at: int | None
    """The first position shown after the restart (None: done before it)."""


def participant(shared: Shared, code: str, path: str, total: int) -> Result:
    """Consent, then answer every item; on a refused connection (the server killed) wait for the
    restart and go on from whatever page the server shows. Bounded: at most 6 requests per item."""
    from urllib.parse import urlencode

    acked: list[int] = []
    seen_after_restart: int | None = None
    for _ in range(6 * (total + 2)):
        try:
            status, page = request(shared, "GET", path)
            assert status == 200, (status, page)
            if shared.restarted.is_set() and seen_after_restart is None:
                got = re.search(r"Item (\d+) of", page)
                seen_after_restart = int(got.group(1)) - 1 if got else total
            if "Before you start" in page:
                request(shared, "POST", path + "/consent", urlencode({"csrf": hidden(page, "csrf")}))
                continue
            if 'id="done"' in page:
                return Result(code, acked, seen_after_restart)
            shared.wait_if_paused()
            position = int(hidden(page, "position"))
            # resumed, never set back: every acknowledged answer is behind the item shown now
            assert position > max(acked, default=-1), (code, position, acked)
            form = {n: hidden(page, n) for n in ("csrf", "position", "shown_at")}
            status, _ = request(shared, "POST", path + "/answer",
                                urlencode({**form, "answer": answer_of(code, position), "rating": str(1 + position % 5)}))
            assert status in (303, 409), status
            if status == 303:
                acked.append(position)
                shared.ack()
        except (OSError, http.client.HTTPException):
            assert shared.restarted.wait(START_TIMEOUT_S + 60), "the server was not restarted"
    raise AssertionError(f"{code} did not finish within its bound")


@dataclass
class ReportLoop:
    """`legival report` run again and again on the served store (a real process each time) until told
    to stop: each must succeed, none refused for a lock (docs/study.md "The store while a study runs")."""

    db: Path
    out: Path
    stop: threading.Event = field(default_factory=threading.Event)
    ran: threading.Event = field(default_factory=threading.Event)
    runs: list[tuple[int, str]] = field(default_factory=list)

    def run(self) -> None:
        env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        while not self.stop.is_set():
            p = subprocess.run([sys.executable, "-m", "legival", "report", "--db", str(self.db), "--out", str(self.out),
                                "--resamples", "0"], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
            self.runs.append((p.returncode, p.stderr[-2000:]))
            self.ran.set()


def test_thirty_participants_a_report_loop_a_kill_9_and_a_restart_lose_nothing(served: Served, tmp_path: Path) -> None:
    """Issue 46's acceptance: 30 participants answer while `legival report` runs in a loop on the same
    store; the server is killed with kill -9 half-way and started again; then `legival study grade`.
    Every acknowledged answer is stored exactly once and counted once in the report; no command was
    refused for a lock (the server never holds the store: it commits to the journal)."""
    codes = served.codes()
    totals = {c: sum(1 for r in served.plan if r["code"] == c) for c in codes}
    ANSWER_GOLD.update({(str(r["code"]), int(r["position"])): served.gold[str(r["trace_id"])]  # type: ignore[call-overload]
                        for r in served.plan if r["kind"] == "attention"})
    first = start(served.db)
    paths = {c: first.links[c].split(f":{first.port}", 1)[1] for c in codes}
    loop = ReportLoop(served.db, tmp_path / "report")
    # a third of the answers, then a pause until a report has run beside them; the kill at two thirds
    shared = Shared(first.port, kill_after=2 * sum(totals.values()) // 3, pause_after=sum(totals.values()) // 3,
                    resume=loop.ran)
    second: Running | None = None
    reporter = threading.Thread(target=loop.run, daemon=True)
    reporter.start()
    try:
        with ThreadPoolExecutor(max_workers=PARTICIPANTS) as pool:
            futures = [pool.submit(participant, shared, c, paths[c], totals[c]) for c in codes]
            assert shared.half.wait(900), "two thirds of the answers never arrived"
            first.proc.kill()  # kill -9: no chance to flush anything
            first.proc.wait(30)
            with shared.lock:
                acked_before_kill = shared.acked
            loop.ran.clear()
            shared.pause_after = None
            second = start(served.db)
            assert {c: second.links[c].split(f":{second.port}", 1)[1] for c in codes} == paths  # the same links
            shared.port = second.port
            shared.restarted.set()
            results = [f.result(timeout=600) for f in futures]
        assert loop.ran.wait(600), "no report ran while the second server served"
        loop.stop.set()
        reporter.join(600)
        code, out, err = second.stop(signal.SIGTERM)
    finally:
        loop.stop.set()
        for run in (first, second):
            if run is not None and run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait(30)
    assert first.proc.poll() is not None and second.proc.poll() is not None
    assert code == 0, err
    assert loop.runs and all(rc == 0 for rc, _ in loop.runs), loop.runs  # every report ran; none refused
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stopped_by"] == "SIGTERM" and summary["study"] == STUDY
    assert 0 < summary["answers_stored"] <= sum(totals.values()) - acked_before_kill + PARTICIPANTS
    first.stderr.seek(0)
    stderr_text = first.stderr.read() + err
    for c in [*codes, "admin"]:
        tok = first.links[c].rsplit("/", 1)[1]
        assert tok not in stderr_text and tok not in json.dumps(summary)
    first.stderr.close()
    second.stderr.close()
    assert 0 < acked_before_kill < sum(totals.values())
    graded = legival("study", "grade", "--db", str(served.db))  # the first writer: absorbs the journal, grades
    assert graded.returncode == 0, graded.stderr
    with Store(served.db, read_only=True) as store:
        assert store.journaled == 0  # nothing left in the journal: all of it is in the store
        got = reads.answers(store, STUDY)
    by_item = {(r["code"], r["position"]): r["item_id"] for r in served.plan}
    stored = {(r["code"], r["item_id"]): r["answer"] for r in got.to_dicts()}
    assert got.height == len(stored) == sum(totals.values())  # every answer, each exactly once
    for r in results:
        c = r.code
        assert r.acked == sorted(set(r.acked))
        for position in range(totals[c]):
            assert stored[(c, by_item[(c, position)])] == answer_of(c, position)
        # every participant not done before the kill came back after the restart
        assert r.resumed_at is not None or len(r.acked) == totals[c], r
    final = legival("report", "--db", str(served.db), "--out", str(tmp_path / "final"), "--resamples", "0")
    assert final.returncode == 0, final.stderr
    from legival_core.safe_csv import read_csv

    human = read_csv(tmp_path / "final" / "coverage.csv").filter(metric="human_study")
    items = sum(1 for r in served.plan if r["kind"] == "item")
    assert human["n"].cast(int).sum() == items, human  # the report counts each answer once
    lat = sorted(shared.latencies)
    print(f"\n{len(lat)} requests: median {lat[len(lat) // 2] * 1000:.1f} ms, p95 {lat[int(len(lat) * .95)] * 1000:.1f} ms, "
          f"max {lat[-1] * 1000:.1f} ms; killed after {acked_before_kill} acknowledged answers; {len(loop.runs)} reports "
          "ran meanwhile")


def test_refusals_are_one_error_line(served: Served) -> None:
    legival("study", "serve", "--db", str(served.db), "--name", "nope", "--port", "0").error(
        "--name", "no study 'nope'", STUDY)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        legival("study", "serve", "--db", str(served.db), "--name", STUDY, "--port", str(port)).error(
            "--port", "in use")
    key = key_path(served.db, STUDY)
    os.chmod(key, 0o644)
    try:
        legival("study", "serve", "--db", str(served.db), "--name", STUDY, "--port", "0").error(
            "readable or writable by group or others", "chmod 600")
    finally:
        os.chmod(key, 0o600)
    moved = key.with_suffix(".moved")
    key.rename(moved)
    try:
        legival("study", "serve", "--db", str(served.db), "--name", STUDY, "--port", "0").error("no key file")
    finally:
        moved.rename(key)
    legival("study", "serve", "--db", str(served.db), "--name", STUDY, "--allow-host", "http://x/").error(
        "--allow-host")


def _get(port: int, path: str, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_wildcard_host_prints_links_a_participant_can_open(served: Served) -> None:
    """--host 0.0.0.0: no link names 0.0.0.0 (no browser can use it); with --allow-host the links name
    that host, and the warning says the proxy's scheme and port are the participants'; without it, the
    warning says requests are refused unless their name is given with --allow-host."""
    run = start(served.db, "--host", "0.0.0.0", "--allow-host", "study.example.org")
    try:
        assert all(u.startswith(f"http://study.example.org:{run.port}/") for u in run.links.values()), run.links
        path = "/p/" + run.links["P01"].rsplit("/p/", 1)[1]
        assert _get(run.port, path, f"study.example.org:{run.port}") == 200
    finally:
        code, out, err = run.stop()
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["command"] == "study serve"
    assert "the links name study.example.org with this server's scheme and port" in err
    assert "participants use the proxy's scheme and port" in err
    run = start(served.db, "--host", "0.0.0.0")
    try:
        assert all(u.startswith(f"http://127.0.0.1:{run.port}/") for u in run.links.values()), run.links
        assert _get(run.port, "/p/" + run.links["P01"].rsplit("/p/", 1)[1], f"127.0.0.1:{run.port}") == 200
    finally:
        code, out, err = run.stop()
    assert code == 0 and "participants' requests are refused unless the name they use" in err
    assert "given with --allow-host" in err


def test_while_a_study_is_served_commands_use_the_store_and_see_every_answer(tmp_path: Path) -> None:
    """docs/study.md "The store while a study runs": the server holds no lock on the store, so `study
    list` and `study grade` run on it while it serves and see every acknowledged answer (the journal);
    a second server of the same study is refused (one server keeps a study's answers)."""
    from urllib.parse import urlencode

    own = make_served_study(tmp_path / "s.duckdb", participants=2, per_participant=3, n_problems=8,
                            teachers=("alpha", "beta"))
    run = start(own.db)
    shared = Shared(run.port)
    acked = 0
    try:
        for code in own.codes():
            path = run.links[code].split(f":{run.port}", 1)[1]
            for _ in range(8):
                status, page = request(shared, "GET", path)
                if "Before you start" in page:
                    request(shared, "POST", path + "/consent", urlencode({"csrf": hidden(page, "csrf")}))
                    continue
                if 'id="done"' in page or acked >= 4:
                    break
                form = {n: hidden(page, n) for n in ("csrf", "position", "shown_at")}
                status, _ = request(shared, "POST", path + "/answer", urlencode({**form, "answer": f"{code} says 42"}))
                assert status == 303
                acked += 1
        listed = legival("study", "list", "--db", str(own.db))
        graded = legival("study", "grade", "--db", str(own.db))  # a writer: absorbs what the server committed
        again = legival("study", "serve", "--db", str(own.db), "--name", STUDY, "--port", "0")
        status, page = request(shared, "GET", run.links["P01"].split(f":{run.port}", 1)[1])  # still serving
    finally:
        code, _, err = run.stop()
    assert code == 0, err
    assert listed.returncode == 0 and listed.summary()["studies"][0]["answers"] == acked == 4, listed.stdout
    assert graded.returncode == 0, graded.stderr
    again.error("another `legival study serve` serves study")
    assert status == 200
    with Store(own.db, read_only=True) as store:
        assert reads.answers(store, STUDY).height == acked
