"""`legival study export --format label-studio` and `legival study import` against the real Label Studio
(`.venv-ls`, made by `bash scripts/setup_label_studio.sh`): one server for the
module, started with a user and an API token from its environment (no signup) and ended by the
fixture on every path (checked gone). Label Studio validates our config.xml (a project refuses a bad
one), imports our tasks, stores annotations made through its API as two participants' users, and
writes the JSON exports (its quick export, `completed_by` an id; a snapshot, `completed_by` an
object) that `legival study import` reads back. With LEGIVAL_LS_FIXTURE_OUT=DIR the exports are also
copied to DIR (how tests/fixtures/label_studio/ was made)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from legival_core.safe_csv import read_csv
from legival_core.store import Store
from legival_core.store import study as reads
from tests._cli import legival
from tests.core.study.server_store import STUDY, Served, make_served_study

REPO = Path(__file__).resolve().parents[2]
LABEL_STUDIO = REPO / ".venv-ls" / "bin" / "label-studio"
TOKEN = "0123456789abcdef0123456789abcdef01234567"
START_S = 240.0
HOSTILE = "=SUM(A1) <script>alert(1)</script> ' \" \\ & \u202e\u00e9\n second line"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LABEL_STUDIO.exists(), reason="Label Studio is not installed: bash scripts/setup_label_studio.sh "
                       "(a venv .venv-ls with label-studio==1.23.2)"),
]


@dataclass
class LabelStudio:
    url: str
    proc: subprocess.Popen[bytes]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def download(self, path: str, to: Path) -> Path:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            to.write_bytes(r.read())
        return to


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_alive(sid: int) -> list[int]:
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != b"Z":
                alive.append(int(entry))
    return alive


@pytest.fixture(scope="module")
def label_studio() -> Iterator[LabelStudio]:
    tmp = Path(tempfile.mkdtemp(prefix="legival-ls-"))
    port = _free_port()
    env = {**os.environ, "HOME": str(tmp), "LABEL_STUDIO_USERNAME": "admin@legival.invalid",
           "LABEL_STUDIO_PASSWORD": "not-a-real-password-1", "LABEL_STUDIO_USER_TOKEN": TOKEN,
           "LATEST_VERSION_CHECK": "false", "COLLECT_ANALYTICS": "false", "DJANGO_DB": "sqlite"}
    log = (tmp / "ls.log").open("wb")
    proc = subprocess.Popen([str(LABEL_STUDIO), "start", "--no-browser", "--port", str(port), "--data-dir",
                             str(tmp / "data"), "--enable-legacy-api-token"], env=env, cwd=tmp, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    ls = LabelStudio(f"http://127.0.0.1:{port}", proc)
    try:
        deadline, wake = time.monotonic() + START_S, threading.Event()
        while True:  # its first start migrates a new database: tens of seconds
            assert proc.poll() is None, (tmp / "ls.log").read_text(errors="replace")[-3000:]
            try:
                if ls.call("GET", "/api/current-user/whoami")["email"] == "admin@legival.invalid":
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, f"Label Studio did not answer within {START_S:g} s"
            wake.wait(0.5)
        yield ls
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()
        left = _session_alive(proc.pid)
        shutil.rmtree(tmp, ignore_errors=True)
        assert proc.returncode is not None and not left, f"Label Studio left processes behind: {left}"


@pytest.fixture(scope="module")
def exported() -> Iterator[tuple[Served, Path]]:
    with tempfile.TemporaryDirectory(prefix="legival-ls-study-") as tmp:
        served = make_served_study(Path(tmp) / "s.duckdb", participants=3, per_participant=3, attention=1)
        out = Path(tmp) / "ls"
        r = legival("study", "export", "--db", str(served.db), "--name", STUDY, "--format", "label-studio",
                    "--out", str(out))
        assert r.returncode == 0, r.stderr
        yield served, out


def _import(served: Served, file: Path, *extra: str) -> Any:
    return legival("study", "import", "--db", str(served.db), "--name", STUDY, str(file), *extra)


def _stored(served: Served) -> dict[tuple[str, str], tuple[str, int | None, float | None]]:
    with Store(served.db, read_only=True) as store:
        return {(r["code"], r["item_id"]): (r["answer"], r["rating"], r["seconds"])
                for r in reads.answers(store, STUDY).to_dicts()}


def test_label_studio_takes_our_files_and_its_exports_import_back(label_studio: LabelStudio,
                                                                   exported: tuple[Served, Path]) -> None:
    ls, (served, out) = label_studio, exported
    config = (out / "config.xml").read_text()
    tasks = json.loads((out / "tasks.json").read_text())
    project = ls.call("POST", "/api/projects", {"title": "legival study pilot", "label_config": config})
    assert project["label_config"].strip() == config.strip()  # Label Studio validated and kept it
    got = ls.call("POST", f"/api/projects/{project['id']}/import", tasks)
    assert got["task_count"] == len(tasks)
    stored = ls.call("GET", f"/api/tasks/?project={project['id']}&page_size=1000")["tasks"]
    assert sorted(t["data"]["item_key"] for t in stored) == sorted(t["data"]["item_key"] for t in tasks)
    task_of = {t["data"]["item_key"]: t["id"] for t in stored}

    # two participants' users, named by their codes (e-mail P01@...), annotate their own items
    users = {c: ls.call("POST", "/api/users/", {"email": f"{c}@lab.invalid", "username": c})["id"]
             for c in ("P01", "P02")}
    plan = read_csv(out / "assignments.csv").to_dicts()
    typed: dict[tuple[str, str], tuple[str, int | None, float]] = {}
    item_of = {r["item_key"]: served.item(r["code"], r["position"])["item_id"] for r in plan}
    for n, r in enumerate(x for x in plan if x["code"] in users):
        text = HOSTILE if n == 0 else f"{r['code']} answer {r['position']}"
        rating = None if n == 1 else 1 + n % 5
        result = [{"from_name": "answer", "to_name": "problem", "type": "textarea", "value": {"text": [text]}}]
        if rating is not None:
            result.append({"from_name": "rating", "to_name": "prefix", "type": "rating", "value": {"rating": rating}})
        ls.call("POST", f"/api/tasks/{task_of[r['item_key']]}/annotations/",
                {"result": result, "lead_time": 10.5 + n, "completed_by": users[r["code"]]})
        typed[(r["code"], str(item_of[r["item_key"]]))] = (text, rating, 10.5 + n)
    skipped = next(r for r in plan if r["code"] == "P03")  # a skipped task (P03 has no user: never read)
    ls.call("POST", f"/api/tasks/{task_of[skipped['item_key']]}/annotations/",
            {"result": [], "was_cancelled": True, "completed_by": users["P01"]})

    quick = ls.download(f"/api/projects/{project['id']}/export?exportType=JSON", out.parent / "quick.json")
    snap = ls.call("POST", f"/api/projects/{project['id']}/exports", {"title": "all", "serialization_options": {
        "annotations__completed_by": {"only_id": False}}})
    snapshot = ls.download(f"/api/projects/{project['id']}/exports/{snap['id']}/download?exportType=JSON",
                           out.parent / "snapshot.json")
    assert {type(a["completed_by"]) for t in json.loads(quick.read_text()) for a in t["annotations"]} == {int}
    assert {type(a["completed_by"]) for t in json.loads(snapshot.read_text()) for a in t["annotations"]} == {dict}

    # the snapshot names annotators by e-mail: P01@lab.invalid is participant P01
    r = _import(served, snapshot)
    assert r.returncode == 0, r.stderr
    s = r.summary()
    assert (s["stored"], s["already_stored"], s["cancelled"], s["participants"]) == (len(typed), 0, 1, 2)
    assert _stored(served) == typed  # hostile text verbatim, no rating stays none, lead_time -> seconds

    # the quick export names them by user id: unknown without a map, then all already stored
    r = _import(served, quick)
    assert r.returncode == 2 and re.search(r"annotator '\d+' is not a participant", r.stderr), r.stderr
    assert f"{quick}: task " in r.stderr and "completed_by" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    mapping = out.parent / "annotators.csv"
    mapping.write_text("annotator,code\n" + "".join(f"{i},{c}\n" for c, i in users.items()))
    r = _import(served, quick, "--annotators", str(mapping))
    assert r.returncode == 0, r.stderr
    assert (r.summary()["stored"], r.summary()["already_stored"]) == (0, len(typed)) and "nothing new" in r.stdout

    # an answer changed in Label Studio afterwards: a conflict naming the task, nothing stored
    first, ann = next((t, a) for t in json.loads(quick.read_text()) for a in t["annotations"] if not a["was_cancelled"])
    ls.call("PATCH", f"/api/annotations/{ann['id']}/",
            {"result": [{"from_name": "answer", "to_name": "problem", "type": "textarea",
                         "value": {"text": ["a changed answer"]}}]})
    changed = ls.download(f"/api/projects/{project['id']}/export?exportType=JSON", out.parent / "changed.json")
    before = _stored(served)
    r = _import(served, changed, "--annotators", str(mapping))
    assert r.returncode == 2 and "CONFLICT" in r.stderr and f"id {first['id']})" in r.stderr, r.stderr
    assert _stored(served) == before

    if os.environ.get("LEGIVAL_LS_FIXTURE_OUT"):
        dest = Path(os.environ["LEGIVAL_LS_FIXTURE_OUT"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(quick, dest / "export_quick.json")
        shutil.copy(snapshot, dest / "export_snapshot.json")
        (dest / "item_keys.json").write_text(json.dumps(dict(sorted(
            (t["data"]["item_key"], str(_item_id(served, t["data"]["item_key"]))) for t in tasks)), indent=1) + "\n")


def _item_id(served: Served, key: str) -> str:
    from legival_core.study.label_studio import item_key

    with Store(served.db, read_only=True) as store:
        return next(i for i in reads.item_kinds(store, STUDY) if item_key(served.key, STUDY, i) == key)


def test_a_project_per_participant_shows_their_items_in_the_designs_order(label_studio: LabelStudio,
                                                                           exported: tuple[Served, Path]) -> None:
    ls, out = label_studio, exported[1]
    mine = json.loads((out / "participants" / "P03.json").read_text())
    plan = [r for r in read_csv(out / "assignments.csv").to_dicts() if r["code"] == "P03"]
    assert [t["data"]["item_key"] for t in mine] == [r["item_key"] for r in plan]
    project = ls.call("POST", "/api/projects", {"title": "legival study pilot P03",
                                                "label_config": (out / "config.xml").read_text()})
    ls.call("POST", f"/api/projects/{project['id']}/import", mine)
    for r in plan:  # Label Studio's label stream (sequential sampling) gives them in the design's order
        task = ls.call("GET", f"/api/projects/{project['id']}/next")
        assert task["data"]["item_key"] == r["item_key"]
        ls.call("POST", f"/api/tasks/{task['id']}/annotations/",
                {"result": [{"from_name": "answer", "to_name": "problem", "type": "textarea",
                             "value": {"text": [f"p3 {r['position']}"]}}], "lead_time": 3.0})
