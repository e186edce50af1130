"""Label Studio interop without the server (legival_core/study/label_studio.py, docs/study.md "Label
Studio"): the exported tasks are blind, the config is what the import reads, and `legival study import`
refuses what it must. The exports read here are Label Studio 1.23.2's own files
(tests/fixtures/label_studio/, written by tests/cli/test_study_label_studio.py against the real
server for a study made as `make_served_study(participants=3, per_participant=3, attention=1)` makes
it); a test only re-keys their tasks to this store's study key or changes one value, never writes the
format by hand."""

from __future__ import annotations

import json
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legival_core.outputs import MANIFEST
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.label_studio import (
    MAX_LEAD_SECONDS,
    LabelStudioError,
    export_tasks,
    item_key,
    read_export,
)
from legival_core.study.pages import MAX_ANSWER_CHARS
from tests._cli import legival
from tests.core.study.server_store import STUDY, Served, copy_served, make_served_study

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "label_studio"
HOSTILE = "=SUM(A1) <script>alert(1)</script> ' \" \\ & \u202e\u00e9\n second line"
"""What tests/cli/test_study_label_studio.py typed as P01's first answer."""


@pytest.fixture(scope="module")
def template() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="legival-ls-core-") as tmp:
        yield make_served_study(Path(tmp) / "s.duckdb", participants=3, per_participant=3, attention=1)


@pytest.fixture
def served(template: Served, tmp_path: Path) -> Served:
    """A fresh copy of the study (store and key file) per test."""
    return copy_served(template, tmp_path)


def rekeyed(served: Served, name: str, to: Path, change: Any = None) -> Path:
    """Label Studio's export `name` with its item keys made this study's (the fixture's study had
    another key); `change(tasks)` may alter one value."""
    keys = json.loads((FIXTURES / "item_keys.json").read_text())
    tasks = json.loads((FIXTURES / name).read_text())
    for t in tasks:
        t["data"]["item_key"] = item_key(served.key, STUDY, keys[t["data"]["item_key"]])
    if change is not None:
        change(tasks)
    to.write_text(json.dumps(tasks, indent=1, ensure_ascii=False))  # indented: one task per many lines
    return to


def run_import(served: Served, file: Path, *extra: str) -> Any:
    return legival("study", "import", "--db", str(served.db), "--name", STUDY, str(file), *extra)


def stored(served: Served) -> dict[tuple[str, str], tuple[str, int | None]]:
    with Store(served.db, read_only=True) as store:
        return {(r["code"], r["item_id"]): (r["answer"], r["rating"]) for r in reads.answers(store, STUDY).to_dicts()}


def first_task(name: str) -> tuple[int, str]:
    """The first task's id and its first annotator's user id in Label Studio's export `name`: Label
    Studio numbers them, so a regenerated fixture may change them; a test reads them from here."""
    task = json.loads((FIXTURES / name).read_text())[0]
    who = task["annotations"][0]["completed_by"]
    return task["id"], str(who["id"] if isinstance(who, dict) else who)


def annotator_map() -> str:
    """The --annotators CSV text mapping Label Studio's user ids to codes, read from the snapshot
    export (which names each user by id and e-mail `<code>@...`)."""
    users = {(a["completed_by"]["id"], a["completed_by"]["email"].split("@")[0])
             for t in json.loads((FIXTURES / "export_snapshot.json").read_text()) for a in t["annotations"]}
    return "annotator,code\n" + "".join(f"{i},{code}\n" for i, code in sorted(users))


def submitted(name: str) -> list[dict[str, Any]]:
    return [a for t in json.loads((FIXTURES / name).read_text()) for a in t["annotations"] if not a["was_cancelled"]]


# --- export ---------------------------------------------------------------------------------------------


def test_every_task_holds_the_problem_and_the_prefix_only(template: Served) -> None:
    with Store(template.db, read_only=True) as store:
        made = export_tasks(store, STUDY, template.key)
        kinds = reads.item_kinds(store, STUDY)
        texts = {i: reads.item_text(store, STUDY, i, SEGMENTER_VERSION) for i in kinds}
    assert len(made.tasks) == len(kinds) and {t["data"]["item_key"] for t in made.tasks} == {
        item_key(template.key, STUDY, i) for i in kinds}
    by_key = {item_key(template.key, STUDY, i): i for i in kinds}
    trace_of = {"\n".join(s): tid for tid, s in template.steps.items()}
    for task in made.tasks:
        assert set(task) == {"data"} and set(task["data"]) == {"item_key", "problem", "prefix"}
        item_id = by_key[task["data"]["item_key"]]
        t = texts[item_id]
        assert t is not None
        tid = trace_of[t.reasoning]
        steps, prefix, blob = template.steps[tid], task["data"]["prefix"], json.dumps(task)
        assert prefix == "\n".join(steps[:t.k]) and task["data"]["problem"] == t.question
        assert not [s for s in steps[t.k:] if s.split(" and go on")[0] in blob]  # no later step
        gold = template.gold[tid]
        assert gold not in blob or any(gold in s for s in steps[:t.k])  # the gold only where the prefix states it
        assert tid not in blob and item_id not in blob and "answer_text" not in blob
    # tasks come in key order, not the design's: attention checks are not grouped or marked
    assert [t["data"]["item_key"] for t in made.tasks] == sorted(by_key)


def test_item_keys_are_opaque_and_follow_the_study_key() -> None:
    a, b = item_key(b"k" * 32, STUDY, "A0001"), item_key(b"j" * 32, STUDY, "A0001")
    assert a != b and a == item_key(b"k" * 32, STUDY, "A0001") and "A0001" not in a and len(a) == 21
    assert item_key(b"k" * 32, STUDY, "I0001") != a and item_key(b"k" * 32, "other", "A0001") != a


def test_the_config_names_what_the_import_reads(template: Served) -> None:
    with Store(template.db, read_only=True) as store:
        root = ET.fromstring(export_tasks(store, STUDY, template.key).config_xml)
    texts = {e.get("name"): e.get("value") for e in root.iter("Text")}
    assert texts == {"problem": "$problem", "prefix": "$prefix"}
    (area,), (rating,) = list(root.iter("TextArea")), list(root.iter("Rating"))
    assert (area.get("name"), area.get("required"), area.get("maxSubmissions")) == ("answer", "true", "1")
    assert (rating.get("name"), rating.get("maxRating")) == ("rating", "5")
    assert not list(root.iter("HyperText"))  # texts shown as text, never as HTML


def test_export_writes_the_folder_once_and_refuses_to_overwrite(template: Served, tmp_path: Path) -> None:
    out = tmp_path / "ls"
    args = ("study", "export", "--db", str(template.db), "--name", STUDY, "--format", "label-studio", "--out", str(out))
    r = legival(*args)
    assert r.returncode == 0, r.stderr
    s = r.summary()
    assert (s["tasks"], s["participants"], s["assignments"]) == (len(json.loads((out / "tasks.json").read_text())), 3,
                                                                 len(template.plan))
    assert sorted(p.name for p in (out / "participants").iterdir()) == ["P01.json", "P02.json", "P03.json"]
    assert {p.name for p in out.iterdir()} == {"tasks.json", "config.xml", "assignments.csv", "README.txt", MANIFEST,
                                               "participants"}
    (out / "tasks.json").write_text("mine")
    r = legival(*args)
    assert r.returncode == 2 and f"--out {out}: is not empty (an earlier export: --force replaces it)" in r.stderr
    assert (out / "tasks.json").read_text() == "mine"
    r = legival(*args, "--force")
    assert r.returncode == 0 and (out / "tasks.json").read_text() != "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["ls"]  # no temporary folder left beside it
    r = legival(*args[:-4], "--format", "csv", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--format: unknown format 'csv' (known: label-studio)" in r.stderr
    r = legival("study", "export", "--db", str(template.db), "--name", "nope", "--format", "label-studio", "--out",
                str(tmp_path / "y"))
    assert r.returncode == 2 and "--name: no study 'nope'" in r.stderr and not (tmp_path / "y").exists()


# --- import -------------------------------------------------------------------------------------------


def test_import_stores_each_answer_verbatim_once_and_a_rerun_stores_nothing(served: Served, tmp_path: Path) -> None:
    file = rekeyed(served, "export_snapshot.json", tmp_path / "e.json")
    r = run_import(served, file)
    assert r.returncode == 0, r.stderr
    answers = submitted("export_snapshot.json")
    s = r.summary()
    assert (s["stored"], s["already_stored"], s["cancelled"], s["participants"]) == (len(answers), 0, 1, 2)
    got = stored(served)
    assert sorted(a for a, _ in got.values()) == sorted("\n".join(a["result"][0]["value"]["text"]) for a in answers)
    assert (HOSTILE, 1) in got.values()  # formula, script, quotes, bidi control and newline: as typed
    r = run_import(served, file)
    assert r.returncode == 0 and (r.summary()["stored"], r.summary()["already_stored"]) == (0, len(answers))
    assert "nothing new stored" in r.stdout and stored(served) == got


def test_the_quick_export_needs_the_annotator_map_and_then_matches_the_snapshot(served: Served, tmp_path: Path) -> None:
    quick = rekeyed(served, "export_quick.json", tmp_path / "q.json")
    r = run_import(served, quick)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    task_id, annotator = first_task("export_quick.json")
    assert f"error: {quick}: task 0 (line 2, id {task_id}): annotations[0].completed_by: annotator '{annotator}' is " \
        "not a participant" in r.stderr and "--annotators" in r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text(annotator_map().replace(",P02", ",P99"))
    r = run_import(served, quick, "--annotators", str(bad))
    assert r.returncode == 2 and f"{bad}: line 3: code: 'P99' is not a participant" in r.stderr
    good = tmp_path / "map.csv"
    good.write_text(annotator_map())
    r = run_import(served, quick, "--annotators", str(good))
    assert r.returncode == 0 and r.summary()["stored"] == len(submitted("export_quick.json"))
    r = run_import(served, rekeyed(served, "export_snapshot.json", tmp_path / "s.json"))
    assert r.returncode == 0 and r.summary()["stored"] == 0  # the same answers, named by e-mail this time


def test_a_conflict_names_the_task_and_stores_nothing_from_the_file(served: Served, tmp_path: Path) -> None:
    def first_only(tasks: list[dict[str, Any]]) -> None:
        keep = next(t for t in tasks if any(not a["was_cancelled"] for a in t["annotations"]))
        keep["annotations"][0]["result"][0]["value"]["text"] = ["a different answer"]
        tasks[:] = [keep]

    one = rekeyed(served, "export_snapshot.json", tmp_path / "one.json", first_only)
    assert run_import(served, one).returncode == 0 and len(stored(served)) == 1
    full = rekeyed(served, "export_snapshot.json", tmp_path / "full.json")
    task_id = json.loads(one.read_text())[0]["id"]
    r = run_import(served, full)
    assert r.returncode == 2 and "CONFLICT" in r.stderr and f", id {task_id}): annotations[0]" in r.stderr
    assert len(stored(served)) == 1  # all or nothing: none of the file's other answers


def test_an_item_outside_the_assignment_is_refused_unless_any_item(served: Served, tmp_path: Path) -> None:
    p03 = {str(r["item_id"]) for r in served.plan if r["code"] == "P03"}
    keys = json.loads((FIXTURES / "item_keys.json").read_text())

    def as_p03(tasks: list[dict[str, Any]]) -> None:  # P03's user answered a P01/P02 item (one shared project)
        t = next(t for t in tasks if t["annotations"] and not t["annotations"][0]["was_cancelled"])
        t["annotations"][0]["completed_by"]["email"] = "P03@lab.invalid"
        t["annotations"][0]["completed_by"]["id"] = 99
        tasks[:] = [t]
        assert keys[next(k for k, v in keys.items() if item_key(served.key, STUDY, v) == t["data"]["item_key"])] \
            not in p03

    file = rekeyed(served, "export_snapshot.json", tmp_path / "x.json", as_p03)
    r = run_import(served, file)
    assert r.returncode == 2 and "participant P03 answered an item that is not in their assignment" in r.stderr
    assert stored(served) == {}
    r = run_import(served, file, "--any-item")
    assert r.returncode == 0 and r.summary()["outside_assignment"] == 1 and list(stored(served)) [0][0] == "P03"


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.__setitem__(0, {"id": 1}), "task 0 (line 2, id 1): data: missing (not a Label Studio task)"),
    (lambda t: t[0]["data"].pop("item_key"), "task 0 (line 2, id {first_id}): data.item_key: missing"),
    (lambda t: t[0]["data"].__setitem__("item_key", "k000"), "data.item_key: 'k000' is not an item of study pilot"),
    (lambda t: t[0]["annotations"][0]["result"].pop(0), "annotations[0].result: no 'answer' text"),
    (lambda t: t[0]["annotations"][0]["result"][1]["value"].__setitem__("rating", 7),
     "annotations[0].result[1].value.rating: 7 is not a whole number from 1 to 5"),
    (lambda t: t[0]["annotations"][0].__setitem__("created_at", "yesterday"),
     "annotations[0].created_at: not an ISO 8601 time"),
    (lambda t: t[0]["annotations"][0]["result"][0]["value"].__setitem__("text", ["x" * (MAX_ANSWER_CHARS + 1)]),
     f"the answer has {MAX_ANSWER_CHARS + 1:,} characters"),
])
def test_a_wrong_field_is_one_error_naming_the_task_and_the_field(served: Served, tmp_path: Path, change: Any,
                                                                 message: str) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", change)
    r = run_import(served, file, "--annotators", str(_map(tmp_path)))
    message = message.format(first_id=first_task("export_quick.json")[0])
    assert r.returncode == 2 and f"error: {file}: " in r.stderr and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr and stored(served) == {}


def _map(tmp_path: Path) -> Path:
    (tmp_path / "map.csv").write_text(annotator_map())
    return tmp_path / "map.csv"


def test_bad_json_names_its_line_and_a_huge_file_is_refused_unread(served: Served, tmp_path: Path) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json")
    lines = file.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if '"lead_time"' in line and i > len(lines) // 2)
    lines[n] = lines[n].replace('"lead_time":', '"lead_time" ')
    file.write_text("\n".join(lines))
    r = run_import(served, file, "--annotators", str(_map(tmp_path)))
    assert r.returncode == 2 and f"error: {file}: line {n + 1}: task " in r.stderr and "bad JSON" in r.stderr
    (tmp_path / "obj.json").write_text('{"tasks": []}')
    r = run_import(served, tmp_path / "obj.json")
    assert r.returncode == 2 and "line 1: not a Label Studio JSON export" in r.stderr
    r = run_import(served, tmp_path / "missing.json")
    assert r.returncode == 2 and "missing.json: no such file" in r.stderr
    run_import(served, tmp_path).error(f"{tmp_path}: is a folder, not a file")
    with pytest.raises(LabelStudioError, match=r"over the 1,000-byte limit"):
        read_export(file, STUDY, served.key, [], set(), max_bytes=1000)
    assert stored(served) == {}


# --- numbers and times read from the file ----------------------------------------------------------


def _with(lead: Any = "keep", created: Any = "keep") -> Any:
    def change(tasks: list[dict[str, Any]]) -> None:
        a = next(a for t in tasks for a in t["annotations"] if not a["was_cancelled"])
        if lead != "keep":
            a["lead_time"] = lead
        if created != "keep":
            a["created_at"] = created
    return change


@pytest.mark.parametrize(("lead", "created", "message"), [
    (float("nan"), "keep", "lead_time: nan is not a number of seconds from 0 to 864,000 (10 days)"),
    (float("inf"), "keep", "lead_time: inf is not a number of seconds"),
    (1e300, "keep", "lead_time: 1e+300 is not a number of seconds"),
    (10 ** 400, "keep", "lead_time: 1000"),
    (-1, "keep", "lead_time: -1 is not a number of seconds"),
    (800_000, "9999-12-31T23:59:59+00:00", "created_at: '9999-12-31T23:59:59+00:00' is not a time from 1970 to 2199"),
    (5, "0001-01-01T00:00:00+05:00", "created_at: not an ISO 8601 time"),
    (5, "1969-12-31T23:59:59Z", "created_at: '1969-12-31T23:59:59Z' is not a time from 1970 to 2199"),
])
def test_a_bad_number_or_time_is_one_error_not_a_crash(served: Served, tmp_path: Path, lead: Any, created: Any,
                                                       message: str) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", _with(lead, created))
    r = run_import(served, file, "--annotators", str(_map(tmp_path)))
    assert r.returncode == 2 and f"error: {file}: task " in r.stderr and message in r.stderr, r.stderr
    assert ", id " in r.stderr and "annotations[" in r.stderr  # names the task, its line and id, and the field
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr and stored(served) == {}


_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10 ** 500),
                                                                                 max_value=10 ** 500),
                     st.none(), st.booleans(), st.text(max_size=5))
_TIMES = st.one_of(st.datetimes(timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=14)),
                                                           timezone(timedelta(hours=-14))]))
                   .map(lambda d: d.isoformat()), st.text(max_size=30), st.integers(), st.none())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lead=_NUMBERS, created=_TIMES)
def test_any_lead_time_or_created_at_is_read_or_refused_never_a_crash(template: Served, lead: Any,
                                                                      created: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = rekeyed(template, "export_quick.json", Path(tmp) / "e.json", _with(lead, created))
        with Store(template.db, read_only=True) as store:
            items = list(reads.item_kinds(store, STUDY))
        try:
            got = read_export(file, STUDY, template.key, items, {"P01", "P02", "P03"},
                              dict(line.split(",") for line in annotator_map().splitlines()[1:]))
        except LabelStudioError as e:
            assert "lead_time" in str(e) or "created_at" in str(e), e
            return
    for a in got.answers:
        assert a.seconds is None or 0 <= a.seconds <= MAX_LEAD_SECONDS
        for t in (a.started_at, a.submitted_at):
            assert t is None or (datetime(1969, 12, 1) <= t < datetime(2200, 1, 1))
