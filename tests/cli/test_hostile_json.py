"""Issue 45, item 4: three small hostile JSON inputs (a 100,000-deep nesting, a 5,000-digit number, a
lone surrogate `\\ud800`) through every door that reads JSON from a user: `legival study import` (Label
Studio exports derived from the real ones in tests/fixtures/label_studio/), `ingest`, `grade`, `z3`,
`judge-agreement --human` (JSONL, and a CSV `steps` cell holding JSON) and `--backend-options`. Each is
one `error:` line naming the file, the line or task, and the field, exit 2, no crash log, and nothing
stored changed (they are read at one boundary, legival_core/untrusted_json.py; tests/core/
test_untrusted_json.py tests it alone, tests/core/test_json_boundary.py that no reader bypasses it)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import Store
from tests._cli import Ran, legival
from tests.conftest import EXAMPLES
from tests.core.study.server_store import STUDY, Served, copy_served, make_served_study
from tests.core.study.test_label_studio import annotator_map, first_task, rekeyed, stored

DEEP = "[" * 100_000 + "]" * 100_000
LONG = "1" * 5000
HOSTILE = {"deep": DEEP, "long": LONG, "surrogate": '"4\\ud800"'}
"""Each as JSON text: none of them can be written by json.dumps (too deep, over Python's 4,300 digits,
and ensure_ascii=False would write the lone surrogate raw), so each replaces a placeholder."""


def placed(text: str, kind: str) -> str:
    return text.replace('"__HOSTILE__"', HOSTILE[kind])


def refused(r: Ran, crash_dir: Path, *fragments: str) -> str:
    line = r.error(*fragments)
    assert "a bug in Legi-Val" not in r.stderr and not crash_dir.exists(), r.stderr
    return line


def crash_env(tmp_path: Path) -> dict[str, str]:
    return {"LEGIVAL_CRASH_DIR": str(tmp_path / "crashes")}


# ----------------------------------------------------------------------------------------- study import


@pytest.fixture(scope="module")
def template() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="legival-hostile-") as tmp:
        yield make_served_study(Path(tmp) / "s.duckdb", participants=3, per_participant=3, attention=1)


@pytest.fixture
def served(template: Served, tmp_path: Path) -> Served:
    return copy_served(template, tmp_path)


def _in_meta(tasks: list[dict[str, Any]]) -> None:
    tasks[0]["meta"]["x"] = "__HOSTILE__"


def _as_lead_time(tasks: list[dict[str, Any]]) -> None:
    tasks[0]["annotations"][0]["lead_time"] = "__HOSTILE__"


def _in_answer(tasks: list[dict[str, Any]]) -> None:
    tasks[0]["annotations"][0]["result"][0]["value"]["text"] = ["__HOSTILE__"]


@pytest.mark.parametrize(("kind", "change", "field", "says"), [
    ("deep", _in_meta, "meta.x", "JSON nested too deeply (more than 128 levels of '[' or '{')"),
    ("long", _as_lead_time, "annotations[0].lead_time", "a number of 5,000 characters (at most 1,000)"),
    ("surrogate", _in_answer, "annotations[0].result[0].value.text[0]",
     "invalid Unicode: a lone surrogate U+D800 in the text at character 2"),
])
def test_study_import_refuses_each_hostile_file_naming_file_task_and_field(
        served: Served, tmp_path: Path, kind: str, change: Any, field: str, says: str) -> None:
    file = rekeyed(served, "export_quick.json", tmp_path / "e.json", change)
    file.write_text(placed(file.read_text(encoding="utf-8"), kind), encoding="utf-8")
    (tmp_path / "map.csv").write_text(annotator_map())
    before = served.db.read_bytes()
    r = legival("study", "import", "--db", str(served.db), "--name", STUDY, str(file), "--annotators",
                str(tmp_path / "map.csv"), env=crash_env(tmp_path))
    task_id = first_task("export_quick.json")[0]
    line = refused(r, tmp_path / "crashes", f"error: {file}: task 0 (line 2", f"): {field}: {says}")
    assert kind == "deep" or f"(line 2, id {task_id}): " in line  # too deep to decode: no id to read
    assert stored(served) == {} and served.db.read_bytes() == before  # the store stays as it was


# -------------------------------------------------------------------------------------- records files


def jsonl(path: Path, good: dict[str, Any], bad: dict[str, Any], kind: str) -> Path:
    path.write_text(json.dumps(good) + "\n" + placed(json.dumps(bad), kind) + "\n", encoding="utf-8")
    return path


TRACE = {"model": "t1", "dataset": "gsm8k", "problem_id": "gsm8k-test-7", "gold_answer": "18",
         "problem": "Tom has 9 apples and buys 9 more. How many apples does he have?",
         "reasoning": "9 + 9 = 18.", "response": "\\boxed{18}"}


@pytest.fixture(scope="module")
def ingested() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="legival-hostile-ingest-") as tmp:
        db = Path(tmp) / "s.duckdb"
        assert legival("ingest", str(EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"), "--db", str(db)).returncode == 0
        yield db


@pytest.mark.parametrize(("kind", "bad", "field", "says"), [
    ("deep", {**TRACE, "model": "t9", "meta": {"x": "__HOSTILE__"}}, "meta.x", "JSON nested too deeply"),
    ("long", {**TRACE, "model": "t9", "score": "__HOSTILE__"}, "score", "a number of 5,000 characters"),
    ("surrogate", {**TRACE, "model": "t9", "reasoning": "__HOSTILE__"}, "reasoning",
     "invalid Unicode: a lone surrogate U+D800 at character 2"),
])
def test_ingest_refuses_each_hostile_line(ingested: Path, tmp_path: Path, kind: str, bad: dict[str, Any],
                                          field: str, says: str) -> None:
    db = tmp_path / "s.duckdb"
    shutil.copy(ingested, db)
    with Store(db, read_only=True) as s:
        before = s.count("traces")
    f = jsonl(tmp_path / "t.jsonl", {**TRACE, "model": "t9"}, bad, kind)
    refused(legival("ingest", str(f), "--db", str(db), env=crash_env(tmp_path)), tmp_path / "crashes",
            f"error: {f}:2: field '{field}': {says}")
    with Store(db, read_only=True) as s:
        assert s.count("traces") == before


PAIR = {"pred": "18", "gold": "18"}
ON_RECORDS = [
    ("deep", {**PAIR, "x": "__HOSTILE__"}, "x", "JSON nested too deeply"),
    ("long", {**PAIR, "n": "__HOSTILE__"}, "n", "a number of 5,000 characters"),
    ("surrogate", {**PAIR, "pred": "__HOSTILE__"}, "pred", "invalid Unicode: a lone surrogate U+D800"),
]


@pytest.mark.parametrize(("kind", "bad", "field", "says"), ON_RECORDS)
def test_grade_and_z3_refuse_each_hostile_line(tmp_path: Path, kind: str, bad: dict[str, Any], field: str,
                                               says: str) -> None:
    """Before issue 45 the lone surrogate crashed both (UnicodeEncodeError writing the output)."""
    f = jsonl(tmp_path / "g.jsonl", PAIR, bad, kind)
    out = tmp_path / "out" / "o.jsonl"
    out.parent.mkdir()
    for args in (("grade", str(f), "--dataset", "gsm8k", "--out", str(out)), ("z3", str(f), "--out", str(out))):
        refused(legival(*args, env=crash_env(tmp_path)), tmp_path / "crashes", f"error: {f}:2: field '{field}': {says}")
        assert not out.exists()


@pytest.mark.parametrize(("kind", "bad", "field", "says"), [
    ("deep", {"trace_id": "t2", "annotator": "a", "steps": "__HOSTILE__"}, "steps", "JSON nested too deeply"),
    ("long", {"trace_id": "t2", "annotator": "a", "count": "__HOSTILE__"}, "count", "a number of 5,000 characters"),
    ("surrogate", {"trace_id": "__HOSTILE__", "annotator": "a", "count": 1}, "trace_id",
     "invalid Unicode: a lone surrogate U+D800"),
])
def test_judge_agreement_refuses_each_hostile_annotation_before_opening_the_store(
        tmp_path: Path, kind: str, bad: dict[str, Any], field: str, says: str) -> None:
    f = jsonl(tmp_path / "h.jsonl", {"trace_id": "t1", "annotator": "a", "count": 1}, bad, kind)
    db = tmp_path / "none.duckdb"
    refused(legival("judge-agreement", "--human", str(f), "--db", str(db), env=crash_env(tmp_path)),
            tmp_path / "crashes", f"error: {f}:2: field '{field}': {says}")
    assert not db.exists()


def test_a_csv_steps_cell_holding_hostile_json_is_that_fields_error(tmp_path: Path) -> None:
    f = tmp_path / "h.csv"
    deep = "[" * 50_000 + "]" * 50_000  # under the csv module's 131,072-character field limit
    f.write_text(f'trace_id,annotator,steps\nt1,a,"[1, 2]"\nt2,a,"{deep}"\n', encoding="utf-8")
    refused(legival("judge-agreement", "--human", str(f), "--db", str(tmp_path / "none.duckdb"),
                    env=crash_env(tmp_path)), tmp_path / "crashes",
            f"error: {f}:3: field 'steps': expected step numbers (a list or '3;7')")


@pytest.mark.parametrize("kind", ["deep", "long", "surrogate"])
def test_backend_options_refuse_each_hostile_value(tmp_path: Path, kind: str) -> None:
    value = placed('{"x": "__HOSTILE__"}', kind)
    refused(legival("transfer", "--db", str(tmp_path / "s.duckdb"), "--backend-options", value,
                    env=crash_env(tmp_path)), tmp_path / "crashes", "error: --backend-options is not valid JSON: ")


def test_a_spec_teachers_select_hands_each_hostile_line_to_ingest_unchanged(tmp_path: Path) -> None:
    """`select:` copies a teacher's lines before ingest reads them (stages.ingest.select_records): a line
    it cannot read is copied as it is, for ingest to name (before issue 45 a deep one was a crash)."""
    from legival_core.stages.ingest import select_records

    for kind in HOSTILE:
        f = jsonl(tmp_path / f"{kind}.jsonl", {**TRACE, "model": "t9"}, {**TRACE, "model": "t9", "x": "__HOSTILE__"},
                  kind)
        (tmp_path / kind).mkdir()
        assert select_records(f, "t9", tmp_path / kind).read_bytes() == f.read_bytes()
