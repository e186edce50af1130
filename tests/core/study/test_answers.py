"""Issue 45, item 5: one validation of a study answer whichever door it comes through
(legival_core/study/answers.py). The same answers are sent to the study server's form and through
`legival study import` (Label Studio exports derived from the real ones in tests/fixtures/label_studio/):
what the server refuses, the import refuses, naming the field; what the server stores, the import stores.
And a Label Studio field of the wrong type (`"was_cancelled": "false"`, a rating of `"5"`) is an error
naming it, never read loosely."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from legival_core.store import study as reads
from legival_core.study.answers import MAX_ANSWER_CHARS, AnswerRefused, checked_answer, rating_of_form
from tests.core.study.server_store import STUDY, Served, copy_served, make_served_study
from tests.core.study.test_label_studio import HOSTILE, _map, first_task, rekeyed, run_import, stored
from tests.core.study.test_server import Client, consent, form, raw_post


@pytest.fixture(scope="module")
def template() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="legival-answers-") as tmp:
        yield make_served_study(Path(tmp) / "s.duckdb", participants=5, per_participant=3, attention=1)


@pytest.fixture
def served(template: Served, tmp_path: Path) -> Served:
    """A fresh copy of the study (store and key file) per test, for the import."""
    return copy_served(template, tmp_path)


@pytest.fixture(scope="module")
def client(template: Served) -> Iterator[Client]:
    """The study app on another copy, for the server's form."""
    with tempfile.TemporaryDirectory(prefix="legival-answers-app-") as tmp:
        db = Path(tmp) / "s.duckdb"
        shutil.copy(template.db, db)
        c = Client(Served(db, template.key, template.plan, template.steps, template.gold))
        try:
            yield c
        finally:
            c.close()
            c.study.close()


NUL_ESC = "4\x00 then \x1b[31m2"
"""The issue's case: an answer with NUL and an ESC sequence (the server refuses it with 400)."""


@pytest.mark.parametrize(("text", "rating", "field", "says"), [
    (NUL_ESC, None, "answer", "control character (NUL U+0000 at character 2)"),
    ("\x1b[2J", None, "answer", "control character (ESC U+001B at character 1)"),
    ("4\x7f", 3, "answer", "control character (DEL U+007F at character 2)"),
    ("x" * (MAX_ANSWER_CHARS + 1), None, "answer", "the answer has 2,001 characters; an answer may hold at most 2,000"),
    (" \n\t", None, "answer", "the answer is empty"),
    ("4\ud800", None, "answer", "a lone surrogate U+D800"),
    (42, None, "answer", "expected text, got a number"),
    (["4"], None, "answer", "expected text, got a list"),
    ("4", "5", "rating", "'5' is not a whole number from 1 to 5"),
    ("4", 6, "rating", "6 is not a whole number"),
    ("4", 0, "rating", "0 is not a whole number"),
    ("4", 5.0, "rating", "5.0 is not a whole number"),
    ("4", True, "rating", "true/false is not a whole number"),
])
def test_an_answer_is_refused_naming_its_field(text: Any, rating: Any, field: str, says: str) -> None:
    with pytest.raises(AnswerRefused) as e:
        checked_answer(text, rating)
    assert (e.value.field, says in e.value.what) == (field, True), e.value.what
    assert e.value.status == (413 if "characters" in says else 400)


@pytest.mark.parametrize(("text", "rating"), [
    (HOSTILE, 1), ("x" * MAX_ANSWER_CHARS, None), ("\u202e42\r\n\tthen 7", 5), ("😀 = 4", 3)])
def test_what_a_person_types_is_kept_as_typed(text: str, rating: int | None) -> None:
    assert checked_answer(text, rating) == (text, rating)


def test_a_forms_rating_is_read_strictly() -> None:
    assert [rating_of_form(v) for v in ("", "1", "5")] == [None, 1, 5]
    for bad in ("6", "0", "5.0", " 5", "05", "+5", "٥", "five"):
        with pytest.raises(AnswerRefused, match="not a whole number from 1 to 5"):
            rating_of_form(bad)


# --------------------------------------------------------------------------- the same answers, two doors

BOTH_DOORS = [  # (text, rating as Label Studio writes it, as a form sends it, what is said)
    (NUL_ESC, None, "", "control character"),
    ("x" * (MAX_ANSWER_CHARS + 1), None, "", "at most 2,000 characters"),
    ("   ", None, "", "answer is empty"),
    ("4\x7f", 2, "2", "control character (DEL"),
    ("4", 6, "6", "is not a whole number from 1 to 5"),
    ("4", 5.5, "5.5", "is not a whole number from 1 to 5"),
]


def _answered(text: str, rating: Any) -> Any:
    def change(tasks: list[dict[str, Any]]) -> None:
        results = tasks[0]["annotations"][0]["result"]
        results[0]["value"]["text"] = [text]
        if rating is None:
            del results[1:]
        else:
            results[1]["value"]["rating"] = rating
        del tasks[1:]
    return change


@pytest.mark.parametrize(("text", "ls_rating", "form_rating", "says"), BOTH_DOORS)
def test_what_the_server_refuses_the_import_refuses(client: Client, served: Served, tmp_path: Path, text: str,
                                                    ls_rating: Any, form_rating: str, says: str) -> None:
    c = client
    consent(c, "P04")
    tok = c.served.token("P04")
    before = reads.answers(c.store, STUDY).height
    body = urlencode({**form(c.http.get(f"/p/{tok}").text), "answer": text, "rating": form_rating}).encode()
    r = raw_post(c, tok, body)
    assert r.status_code in (400, 413) and says in r.text and "nothing was stored" in r.text, r.text
    assert reads.answers(c.store, STUDY).height == before

    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", _answered(text, ls_rating))
    ran = run_import(served, file, "--annotators", str(_map(tmp_path)))
    field = "result[0].value.text" if "rating" not in says and "whole number" not in says else "result[1].value.rating"
    ran.error(f"{file}: task 0 (line 2, id {first_task('export_quick.json')[0]}): annotations[0].{field}: ", says)
    assert stored(served) == {}


def test_what_the_server_stores_the_import_stores(client: Client, served: Served, tmp_path: Path) -> None:
    c = client
    consent(c, "P05")
    tok = c.served.token("P05")
    r = raw_post(c, tok, urlencode({**form(c.http.get(f"/p/{tok}").text), "answer": HOSTILE, "rating": "4"}).encode())
    assert r.status_code == 303 and reads.answers(c.store, STUDY).filter(code="P05")["answer"].to_list() == [HOSTILE]
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", _answered(HOSTILE, 4))
    assert run_import(served, file, "--annotators", str(_map(tmp_path))).returncode == 0
    assert list(stored(served).values()) == [(HOSTILE, 4)]


# ---------------------------------------------------------------------- Label Studio's types, strictly


def _set(path: str, value: Any) -> Any:
    """Set one field of the first task (a dotted path; `annotations.0.x` indexes a list)."""
    def change(tasks: list[dict[str, Any]]) -> None:
        *parents, last = path.split(".")
        node: Any = tasks[0]
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value
    return change


@pytest.mark.parametrize(("path", "value", "says"), [
    ("annotations.0.was_cancelled", "false", "annotations[0].was_cancelled: expected true or false, got 'false'"),
    ("annotations.0.was_cancelled", None, "annotations[0].was_cancelled: expected true or false, got null"),
    ("annotations.0.was_cancelled", 0, "annotations[0].was_cancelled: expected true or false, got 0"),
    ("annotations.0.result.1.value.rating", "5", "annotations[0].result[1].value.rating: '5' is not a whole number"),
    ("annotations.0.result.1.value.rating", True, "annotations[0].result[1].value.rating: true/false is not"),
    ("annotations.0.result.0.value.text", "4", "annotations[0].result[0].value.text: expected a list of texts, got '4'"),
    ("annotations.0.result.0.value.text", [4], "annotations[0].result[0].value.text[0]: expected text, got 4"),
    ("annotations.0.result.0.from_name", 5, "annotations[0].result[0].from_name: expected a control name (text), got 5"),
    ("annotations.0.lead_time", "12.5", "annotations[0].lead_time: '12.5' is not a number of seconds"),
    ("annotations.0.lead_time", False, "annotations[0].lead_time: False is not a number of seconds"),
    ("annotations.0.created_at", 1_700_000_000, "annotations[0].created_at: expected an ISO 8601 time (text), got "
                                                "1700000000"),
    ("annotations.0.completed_by", "P01", "annotations[0].completed_by: expected a user (an id or {id, email}), got "
                                          "'P01'"),
    ("annotations.0.completed_by", True, "annotations[0].completed_by: expected a user (an id or {id, email}), got "
                                         "True"),
    ("annotations.0.completed_by", {"id": "3"}, "annotations[0].completed_by.id: expected a user id (a whole number), "
                                                "got '3'"),
    ("annotations.0.id", "5", "annotations[0].id: expected an annotation id (a whole number), got '5'"),
    ("annotations", {"0": {}}, "annotations: expected a list, got an object"),
])
def test_a_label_studio_field_of_the_wrong_type_is_an_error_naming_it(served: Served, tmp_path: Path, path: str,
                                                                      value: Any, says: str) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", _set(path, value))
    r = run_import(served, file, "--annotators", str(_map(tmp_path)))
    r.error(f"error: {file}: task 0 (line 2", says)
    assert stored(served) == {}


def test_a_task_id_of_the_wrong_type_is_named(served: Served, tmp_path: Path) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", _set("id", "5"))
    run_import(served, file, "--annotators", str(_map(tmp_path))).error(
        f"error: {file}: task 0 (line 2): id: expected a task id (a whole number), got '5'")


def test_a_second_answer_in_one_annotation_is_refused(served: Served, tmp_path: Path) -> None:
    def twice(tasks: list[dict[str, Any]]) -> None:
        results = tasks[0]["annotations"][0]["result"]
        results.append({**results[0], "value": {"text": ["another"]}})
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", twice)
    run_import(served, file, "--annotators", str(_map(tmp_path))).error(
        "annotations[0].result[2]: a second 'answer' result (which one is meant?)")


def test_a_cancelled_annotation_is_one_whose_was_cancelled_is_true(served: Served, tmp_path: Path) -> None:
    """Absent (an older export) is not cancelled; `true` is counted and not stored."""
    def absent(tasks: list[dict[str, Any]]) -> None:
        for t in tasks:
            for a in t["annotations"]:
                if not a["was_cancelled"]:
                    del a["was_cancelled"]
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", absent)
    r = run_import(served, file, "--annotators", str(_map(tmp_path)))
    assert r.returncode == 0, r.stderr
    s = r.summary()
    assert s["stored"] == len(stored(served)) > 0 and s["cancelled"] == 1
