from __future__ import annotations

import json
from pathlib import Path

import pytest

from legival_core.stages.ingest import IngestError, ingest_file
from legival_core.store import Store
from tests._cli import legival as run_legival
from tests._sql import rows
from tests.conftest import EXAMPLES

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
    return {t: rows(store, f"SELECT * FROM {t} ORDER BY ALL") for t in ("problems", "traces", "grades")}


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
    got = rows(store, "SELECT t.problem_id, t.source_correct, g.correct, g.extracted FROM traces t "
                      "JOIN grades g USING (trace_id) ORDER BY 1")
    assert got == [("gsm8k-test-0", True, True, "5"), ("gsm8k-test-1", True, False, "6")]


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


def test_failure_inside_the_write_rolls_back(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure after validation (here: the last grades row violating NOT NULL) undoes the whole file:
    its problems and traces were inserted in the same transaction and are gone too."""
    import duckdb

    import legival_core.stages.ingest as ingest_stage

    ingest_file(store, SAMPLE)
    before = _snapshot(store)
    real = ingest_stage.grade_row

    def broken(trace_id: str, grader: str, g: object) -> dict:
        row = real(trace_id, grader, g)  # type: ignore[arg-type]
        return {**row, "correct": None} if row["trace_id"] == last else row

    f = _write(tmp_path / "new.jsonl", [json.dumps(_rec(problem_id=f"n{i}")) for i in range(3)])
    from legival_core.stages.ingest import parse_record

    last = parse_record(_rec(problem_id="n2"), str(f), 3).trace.trace_id
    monkeypatch.setattr(ingest_stage, "grade_row", broken)
    with pytest.raises(duckdb.ConstraintException):
        ingest_file(store, f)
    assert _snapshot(store) == before
    monkeypatch.undo()
    assert ingest_file(store, f).new_traces == 3


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
    split = dict(rows(store, "SELECT problem_id, [reasoning, answer_text, truncated::VARCHAR] FROM traces ORDER BY 1"))
    assert split["r1"] == ["2 + 3 = 5.", "The answer is \\boxed{5}.", "false"]
    assert split["r2"] == ["2 plus 3 is 5.", "**5**", "false"]
    assert split["r3"] == ["Add them: 5.", "\\boxed{5}", "false"]
    assert split["r4"][2] == "true"
    grades = dict(rows(store, "SELECT t.problem_id, g.status FROM traces t JOIN grades g USING (trace_id)"))
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
    assert rows(store, "SELECT t.dataset, g.correct FROM traces t JOIN grades g USING (trace_id)") == [("math", True)]


# ------------------------------------------------------------------------------------- the grade stage


def _older_gsm8k_grader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the code see gsm8k's grader at version '0' (as an older release of Legi-Val did)."""
    import dataclasses

    import legival_core.datasets.base as datasets_base
    import legival_core.stages.grade as grade_stage

    real = datasets_base.get_dataset

    def older(name: str):  # type: ignore[no-untyped-def]
        spec = real(name)
        return dataclasses.replace(spec, grader_version="0") if spec.name == "gsm8k" else spec

    monkeypatch.setattr(datasets_base, "get_dataset", older)
    monkeypatch.setattr(grade_stage, "get_dataset", older)


def test_grader_version_change_is_regraded_by_the_cli_without_reingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    db = tmp_path / "g.duckdb"
    with monkeypatch.context() as m:
        _older_gsm8k_grader(m)
        with Store(db) as store:
            ingest_file(store, SAMPLE)
            assert rows(store, "SELECT DISTINCT grader FROM grades") == [("gsm8k@0",)]
            old_correct = rows(store, "SELECT count(*) FROM grades WHERE correct")[0][0]
            traces_before = rows(store, "SELECT * FROM traces ORDER BY trace_id")

    def grade_db() -> dict:
        p = run_legival("grade", "--db", str(db))
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    from legival_core.datasets.base import grader_key

    current = grader_key("gsm8k")
    assert current != "gsm8k@0"
    s = grade_db()
    assert (s["command"], s["missing"], s["graded"], s["graders"]) == ("grade", 80, 80, {current: 80})
    assert s["correct"] == old_correct > 0
    with Store(db) as store:
        assert sorted(rows(store, "SELECT grader, count(*) FROM grades GROUP BY 1")) == sorted(
            [("gsm8k@0", 80), (current, 80)])
        assert rows(store, "SELECT * FROM traces ORDER BY trace_id") == traces_before  # nothing re-ingested
        # the same grader function under a new version: every trace gets the same verdict again
        assert rows(store, "SELECT count(*) FROM grades a JOIN grades b USING (trace_id) WHERE a.grader = 'gsm8k@0' "
                           "AND b.grader = ? AND a.correct = b.correct AND a.status = b.status", [current])[0][0] == 80
    again = grade_db()
    assert (again["missing"], again["graded"]) == (0, 0)


def test_grade_cli_modes_are_exclusive_and_need_a_store(tmp_path: Path) -> None:
    legival = run_legival

    p = legival("grade", "--db", str(tmp_path / "none.duckdb"))
    assert p.returncode == 2 and "no such store" in p.stderr and not (tmp_path / "none.duckdb").exists()
    p = legival("grade", str(tmp_path / "x.jsonl"), "--db", str(tmp_path / "none.duckdb"))
    assert p.returncode == 2 and "not both" in p.stderr
    p = legival("grade", str(tmp_path / "x.jsonl"))
    assert p.returncode == 2 and "--dataset" in p.stderr and "--out" in p.stderr


def test_grade_stage_commits_per_chunk_and_resumes(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after two chunks keeps their grades; the rerun grades only the rest. A stored dataset
    with no registered grader is reported, not fatal."""
    from legival_core.stages.base import run_stage
    from legival_core.stages.grade import GradeStage

    with monkeypatch.context() as m:
        _older_gsm8k_grader(m)
        ingest_file(store, SAMPLE)
    store.insert_rows("traces", [{"trace_id": "orphan", "teacher": "t", "dataset": "retired", "problem_id": "p",
                                  "reasoning": "r", "answer_text": "", "truncated": False}])

    def crash_after_two(done: int, total: int) -> None:
        if done >= 14:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stage(GradeStage(chunk=7), store, progress=crash_after_two)
    from legival_core.datasets.base import grader_key

    current = [grader_key("gsm8k")]
    assert rows(store, "SELECT count(*) FROM grades WHERE grader = ?", current) == [(14,)]
    s = run_stage(GradeStage(chunk=7), store)
    assert (s.missing, s.graded, s.unknown_datasets) == (66, 66, ["retired"])
    assert rows(store, "SELECT count(*) FROM grades WHERE grader = ?", current) == [(80,)]


# ------------------------------------------------------------------------ conflicts, duplicates, files


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"gold_answer": "64", "response": "\\boxed{64}"}, "gold_answer", "is stored with gold '5', this file says '64'"),
        ({"gold": "64", "gold_answer": None}, "gold", "is stored with gold '5', this file says '64'"),
        ({"problem": "What is 2 + 4?"}, "problem", "is stored with question 'What is 2 + 3?', this file says 'What is 2 + 4?'"),
        ({"choices": ["A", "B"]}, "choices", "is stored with choices '[]', this file says '[\"A\", \"B\"]'"),
    ],
)
def test_a_problem_redefined_against_the_store_is_an_error(
    store: Store, tmp_path: Path, change: dict, field: str, says: str
) -> None:
    ingest_file(store, _write(tmp_path / "a.jsonl", [json.dumps(_rec())]))
    before = _snapshot(store)
    redefined = {k: v for k, v in _rec(model="t2", **change).items() if v is not None}
    f = _write(tmp_path / "b.jsonl", [json.dumps(_rec(model="t3")), json.dumps(redefined)])
    with pytest.raises(IngestError) as e:
        ingest_file(store, f)
    assert (e.value.line, e.value.field) == (2, field)
    assert str(e.value) == f"{f}:2: field '{field}': problem gsm8k-test-0 {says}"
    assert _snapshot(store) == before
    s = ingest_file(store, f, skip_bad=True)  # skipped and listed, never silently dropped
    assert (s.new_traces, s.new_problems, len(s.bad_lines)) == (1, 0, 1) and s.bad_lines[0] == str(e.value)
    assert rows(store, "SELECT question, gold FROM problems") == [("What is 2 + 3?", "5")]


def test_a_problem_redefined_within_one_file_is_an_error(store: Store, tmp_path: Path) -> None:
    long_q = "Tom has nine apples and buys nine more at the market on Sunday. How many apples now?"
    f = _write(tmp_path / "a.jsonl", [json.dumps(_rec(problem=long_q)), json.dumps(_rec(model="t2")),
                                      json.dumps(_rec(model="t3", problem=long_q.replace("nine more", "ten more")))])
    with pytest.raises(IngestError) as e:
        ingest_file(store, f)
    assert (e.value.line, e.value.field) == (2, "problem")
    assert "problem gsm8k-test-0 has question 'Tom has nine" in str(e.value) and "at line 1 of this file" in str(e.value)
    assert "(from character 1)" in str(e.value)
    assert store.count("traces") == store.count("problems") == 0


def test_identical_duplicate_records_are_counted_not_an_error(store: Store, tmp_path: Path) -> None:
    line = json.dumps(_rec())
    s = ingest_file(store, _write(tmp_path / "a.jsonl", [line, json.dumps(_rec(model="t2")), line, line]))
    assert (s.lines, s.new_traces, s.duplicate_records, s.bad_lines) == (4, 2, 2, [])
    assert s.as_dict()["duplicate_records"] == 2
    again = ingest_file(store, _write(tmp_path / "b.jsonl", [line]))
    assert (again.already_stored, again.duplicate_records) == (1, 0)


def test_a_record_trace_id_names_one_trace_only(store: Store, tmp_path: Path) -> None:
    ingest_file(store, _write(tmp_path / "a.jsonl", [json.dumps(_rec(trace_id="r1"))]))
    before = _snapshot(store)
    other = _write(tmp_path / "b.jsonl", [json.dumps(_rec(trace_id="r1", response="The answer is \\boxed{5}!"))])
    with pytest.raises(IngestError) as e:
        ingest_file(store, other)
    assert e.value.field == "trace_id" and "'r1' is stored for another trace (answer text differ)" in str(e.value)
    twice = _write(tmp_path / "c.jsonl", [json.dumps(_rec(model="t2", trace_id=7)), json.dumps(_rec(model="t3", trace_id=7))])
    with pytest.raises(IngestError) as e:
        ingest_file(store, twice)
    assert e.value.line == 2 and "'7' was given at line 1 of this file to another trace (model differ)" in str(e.value)
    assert _snapshot(store) == before
    assert ingest_file(store, _write(tmp_path / "d.jsonl", [json.dumps(_rec(trace_id="r1"))])).already_stored == 1


def test_unreadable_files_are_file_errors(store: Store, tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    for path, says in ((tmp_path / "dir.jsonl", "is a directory"), (tmp_path / "bad.parquet", "not a readable Parquet"),
                       (tmp_path / "none.jsonl", "no such file")):
        with pytest.raises(IngestError) as e:
            ingest_file(store, path, skip_bad=True)
        assert str(e.value).startswith(f"{path}: {says}")
    assert store.count("traces") == 0


@pytest.mark.parametrize(("line", "field"), [("[" * 5000, "<json>"), ('{"n": ' + "1" * 5000 + "}", "n")])
def test_unreadable_json_is_a_bad_line(store: Store, tmp_path: Path, line: str, field: str) -> None:
    f = _write(tmp_path / "a.jsonl", [json.dumps(_rec()), line])
    with pytest.raises(IngestError) as e:
        ingest_file(store, f)
    assert (e.value.line, e.value.field) == (2, field) and store.count("traces") == 0
    s = ingest_file(store, f, skip_bad=True)
    assert s.new_traces == 1 and len(s.bad_lines) == 1 and f":2: field '{field}'" in s.bad_lines[0]


def test_a_bom_at_the_start_is_accepted(store: Store, tmp_path: Path) -> None:
    f = _write(tmp_path / "a.jsonl", [b"\xef\xbb\xbf" + json.dumps(_rec()).encode(), json.dumps(_rec(model="t2"))])
    assert ingest_file(store, f).new_traces == 2


def test_a_truncated_store_raises_store_unreadable(tmp_path: Path) -> None:
    from legival_core.store import StoreUnreadable

    full = tmp_path / "full.duckdb"
    with Store(full) as s:
        ingest_file(s, SAMPLE)
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(full.read_bytes()[: int(full.stat().st_size * 0.75)])
    try:
        store = Store(cut)
    except StoreUnreadable:
        pytest.skip("this DuckDB version reports the damage when the file is opened")
    with store, pytest.raises(StoreUnreadable, match="damaged or truncated"):
        ingest_file(store, _write(tmp_path / "a.jsonl", [json.dumps(_rec())]))
