from __future__ import annotations

import json
from pathlib import Path

import pytest

from legival_core.ingest import IngestError, ingest_file
from legival_core.store import Store

from .conftest import EXAMPLES

SAMPLE = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"


def _rec(**kw: object) -> dict:
    base = {
        "model": "t1",
        "dataset": "gsm8k",
        "problem_id": "gsm8k-test-0",
        "problem": "What is 2 + 3?",
        "gold_answer": "5",
        "reasoning": "We add 2 and 3. That is 5.",
        "response": "The answer is \\boxed{5}.",
        "correct": True,
    }
    base.update(kw)
    return base


def _write(path: Path, lines: list[str | bytes]) -> Path:
    with path.open("wb") as f:
        for ln in lines:
            f.write(ln if isinstance(ln, bytes) else ln.encode("utf-8"))
            f.write(b"\n")
    return path


def _snapshot(store: Store) -> dict[str, list]:
    return {t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("problems", "traces", "grades")}


def test_ingest_real_traces_is_idempotent(store: Store) -> None:
    first = ingest_file(store, SAMPLE)
    assert first.lines == 80 and first.new_traces == 80 and first.already_stored == 0
    assert store.count("problems") == 16
    snap = _snapshot(store)
    again = ingest_file(store, SAMPLE)
    assert again.new_traces == 0 and again.already_stored == 80
    assert _snapshot(store) == snap


def test_regrades_and_reports_disagreement_with_file_label(store: Store, tmp_path: Path) -> None:
    f = _write(tmp_path / "a.jsonl", [
        json.dumps(_rec()),
        json.dumps(_rec(problem_id="gsm8k-test-1", response="So \\boxed{6}.", correct=True)),
    ])
    s = ingest_file(store, f)
    assert s.new_traces == 2 and s.disagreements == 1
    rows = store.con.execute(
        "SELECT t.problem_id, t.source_correct, g.correct, g.extracted FROM traces t JOIN grades g USING (trace_id) ORDER BY 1"
    ).fetchall()
    assert rows == [("gsm8k-test-0", True, True, "5"), ("gsm8k-test-1", True, False, "6")]


@pytest.mark.parametrize(
    ("line", "field", "line_no"),
    [
        ('{"model": "t1", "dataset": ', "<json>", 2),
        (json.dumps({k: v for k, v in _rec(problem_id="p9").items() if k != "gold_answer"}), "gold_answer", 2),
        (json.dumps(_rec(problem_id="p9", dataset="nosuchset")), "dataset", 2),
        (b'{"model": "t1", "problem": "caf\xe9"}', "<encoding>", 2),
        ("[1, 2]", "<json>", 2),
    ],
)
def test_bad_line_stops_import_and_leaves_store_unchanged(
    store: Store, tmp_path: Path, line: str | bytes, field: str, line_no: int
) -> None:
    ingest_file(store, SAMPLE)
    before = _snapshot(store)
    f = _write(tmp_path / "bad.jsonl", [json.dumps(_rec(problem_id="p1")), line, json.dumps(_rec(problem_id="p2"))])
    with pytest.raises(IngestError) as e:
        ingest_file(store, f)
    assert e.value.line == line_no and e.value.field == field
    assert str(f) in str(e.value) and f":{line_no}:" in str(e.value) and f"'{field}'" in str(e.value)
    assert _snapshot(store) == before


def test_skip_bad_skips_and_lists(store: Store, tmp_path: Path) -> None:
    f = _write(tmp_path / "bad.jsonl", [
        json.dumps(_rec(problem_id="p1")), "{oops", json.dumps(_rec(problem_id="p2", dataset="x"))
    ])
    s = ingest_file(store, f, skip_bad=True)
    assert s.new_traces == 1 and len(s.bad_lines) == 2
    assert ":2:" in s.bad_lines[0] and "'dataset'" in s.bad_lines[1]


def test_failure_inside_the_write_rolls_back(store: Store, tmp_path: Path) -> None:
    """A failure after validation (here: a grades row violating NOT NULL) undoes the whole file."""
    before = _snapshot(store)
    import duckdb

    with pytest.raises(duckdb.ConstraintException), store.transaction():
        store.insert_rows("traces", [{"trace_id": "x", "teacher": "t", "dataset": "gsm8k", "problem_id": "p",
                                      "reasoning": "r", "answer_text": "", "truncated": False}])
        store.insert_rows("grades", [{"trace_id": "x", "grader": "g", "correct": None, "status": "ok"}])
    assert _snapshot(store) == before


def test_raw_outputs_are_split(store: Store, tmp_path: Path) -> None:
    recs = [
        {k: v for k, v in _rec(problem_id="r1", response="<think>2 + 3 = 5.</think>The answer is \\boxed{5}.").items() if k != "reasoning"},
        {k: v for k, v in _rec(problem_id="r2", response="analysis2 plus 3 is 5.assistantfinal**5**").items() if k != "reasoning"},
        {k: v for k, v in _rec(problem_id="r3", response="[THINK]Add them: 5.[/THINK]\\boxed{5}").items() if k != "reasoning"},
        {k: v for k, v in _rec(problem_id="r4", response="<think>2 + 3 is").items() if k != "reasoning"},
    ]
    f = _write(tmp_path / "raw.jsonl", [json.dumps(r) for r in recs])
    s = ingest_file(store, f)
    assert s.new_traces == 4 and s.truncated == 1
    rows = dict(store.con.execute(
        "SELECT problem_id, [reasoning, answer_text, truncated::VARCHAR] FROM traces ORDER BY 1").fetchall())
    assert rows["r1"] == ["2 + 3 = 5.", "The answer is \\boxed{5}.", "false"]
    assert rows["r2"] == ["2 plus 3 is 5.", "**5**", "false"]
    assert rows["r3"] == ["Add them: 5.", "\\boxed{5}", "false"]
    assert rows["r4"][2] == "true"
    grades = dict(store.con.execute(
        "SELECT t.problem_id, g.status FROM traces t JOIN grades g USING (trace_id)").fetchall())
    assert grades["r4"] == "truncated"


def test_parquet_is_accepted(store: Store, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([_rec(problem_id="q1"), _rec(problem_id="q2")]), tmp_path / "t.parquet")
    assert ingest_file(store, tmp_path / "t.parquet").new_traces == 2


def test_math500_alias_maps_to_math(store: Store, tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", [json.dumps(_rec(dataset="math500", problem_id="test/x/1.json", gold_answer="\\frac{1}{2}",
                                                      response="So \\boxed{\\dfrac12}."))])
    ingest_file(store, f)
    assert store.con.execute("SELECT t.dataset, g.correct FROM traces t JOIN grades g USING (trace_id)").fetchall() == [("math", True)]
