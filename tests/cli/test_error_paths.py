"""Bad input through the real `legival` entry point: exit 2, one `error:` line naming what is wrong,
never a traceback, and a store exactly as it was (docs/CLI.md). Also what must NOT be an error: a
BOM, identical duplicate lines, bare answers to `legival grade`, one unreadable record among many."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import TABLES, Store
from tests._cli import Ran
from tests._cli import legival as run_legival
from tests._sql import rows
from tests.conftest import EXAMPLES, REPO

SAMPLE = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
DEEP = "[" * 5000


def legival(*args: str, timeout: float = 180) -> Ran:
    return run_legival(*args, timeout=timeout)


def summary(p: Ran) -> dict[str, Any]:
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def assert_error(p: Ran, *fragments: str) -> str:
    """Exit 2, an `error:` line holding every fragment, and no traceback anywhere; returns the line."""
    return p.error(*fragments)


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (read-only, so looking changes nothing)."""
    with Store(db, read_only=True) as s:
        return {t: rows(s, f"SELECT * FROM {t} ORDER BY ALL") for t in sorted(TABLES)}


def file_state(db: Path) -> tuple[str, list[str]]:
    """The store file's bytes and its sibling files (a WAL would be a change too)."""
    return (hashlib.sha256(db.read_bytes()).hexdigest(),
            sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)))


def rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "t1", "dataset": "gsm8k", "problem_id": "gsm8k-test-7",
                            "problem": "Tom has 9 apples and buys 9 more. How many apples does he have?",
                            "gold_answer": "18", "reasoning": "9 + 9 = 18.", "response": "\\boxed{18}"}
    return {**base, **kw}


def write(path: Path, *lines: dict[str, Any] | str | bytes) -> Path:
    with path.open("wb") as f:
        for ln in lines:
            raw = ln if isinstance(ln, bytes) else (ln if isinstance(ln, str) else json.dumps(ln)).encode("utf-8")
            f.write(raw + b"\n")
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store holding one trace of problem gsm8k-test-7 (gold 18)."""
    path = tmp_path / "s.duckdb"
    summary(legival("ingest", str(write(tmp_path / "a.jsonl", rec())), "--db", str(path)))
    return path


# ------------------------------------------------------------------------- 13: conflicts, duplicates


def test_a_problem_redefined_against_the_store_is_an_error(db: Path, tmp_path: Path) -> None:
    before = snapshot(db)
    b = write(tmp_path / "b.jsonl", rec(model="t2"), rec(model="t3"),
              rec(model="t4", gold_answer="64", response="\\boxed{64}"))
    line = assert_error(legival("ingest", str(b), "--db", str(db)))
    assert f"{b}:3: field 'gold_answer': problem gsm8k-test-7 is stored with gold '18', this file says '64'" in line
    assert snapshot(db) == before


def test_a_problem_redefined_within_one_file_is_an_error(db: Path, tmp_path: Path) -> None:
    before = snapshot(db)
    c = write(tmp_path / "c.jsonl", rec(problem_id="gsm8k-test-8", model="t2"),
              rec(problem_id="gsm8k-test-8", model="t3", problem="Tom has 9 pears. How many pears?"))
    assert_error(legival("ingest", str(c), "--db", str(db)),
                 f"{c}:2: field 'problem': problem gsm8k-test-8 has question", "at line 1 of this file")
    assert snapshot(db) == before


def test_a_record_trace_id_given_to_another_trace_is_an_error(db: Path, tmp_path: Path) -> None:
    first = write(tmp_path / "ids.jsonl", rec(model="t2", trace_id="run-1"))
    summary(legival("ingest", str(first), "--db", str(db)))
    before = snapshot(db)
    again = write(tmp_path / "ids2.jsonl", rec(model="t2", trace_id="run-1", reasoning="9 + 9 is 18."))
    assert_error(legival("ingest", str(again), "--db", str(db)),
                 f"{again}:1: field 'trace_id': trace id 'run-1' is stored for another trace (reasoning differ)")
    same_file = write(tmp_path / "ids3.jsonl", rec(model="t5", trace_id="x"), rec(model="t6", trace_id="x"))
    assert_error(legival("ingest", str(same_file), "--db", str(db)),
                 f"{same_file}:2: field 'trace_id': trace id 'x' was given at line 1")
    assert snapshot(db) == before


def test_conflicts_are_skipped_and_listed_with_skip_bad_and_duplicates_counted(db: Path, tmp_path: Path) -> None:
    b = write(tmp_path / "b.jsonl", rec(model="t2"), rec(model="t2"),
              rec(model="t4", gold_answer="64", response="\\boxed{64}"))
    p = legival("ingest", str(b), "--db", str(db), "--skip-bad")
    s = summary(p)
    assert "Traceback" not in p.stderr
    assert (s["new_traces"], s["bad_lines"], s["duplicate_records"]) == (1, 1, 1)
    assert s["files"][0]["duplicate_records"] == 1
    assert f"skipped: {b}:3: field 'gold_answer'" in p.stderr
    with Store(db, read_only=True) as st:
        assert rows(st, "SELECT gold FROM problems") == [("18",)]
        assert rows(st, "SELECT count(*) FROM traces") == [(2,)]


# ------------------------------------------------------------------------- 14: unreadable inputs


def test_ingest_refuses_unreadable_files(db: Path, tmp_path: Path) -> None:
    before = snapshot(db)
    folder = tmp_path / "traces"
    folder.mkdir()
    write(folder / "x.jsonl", rec())
    assert_error(legival("ingest", str(folder), "--db", str(db)), f"{folder}: is a directory")
    bad_parquet = tmp_path / "t.parquet"
    bad_parquet.write_bytes(b"PAR1 this is not parquet at all")
    assert_error(legival("ingest", str(bad_parquet), "--db", str(db)), f"{bad_parquet}: not a readable Parquet file")
    deep = write(tmp_path / "deep.jsonl", rec(model="t9"), DEEP)
    assert_error(legival("ingest", str(deep), "--db", str(db)), f"{deep}:2: field '<json>': JSON nested too deeply")
    assert snapshot(db) == before


def test_ingest_skip_bad_skips_a_deeply_nested_line(db: Path, tmp_path: Path) -> None:
    deep = write(tmp_path / "deep.jsonl", rec(model="t9"), DEEP)
    p = legival("ingest", str(deep), "--db", str(db), "--skip-bad")
    s = summary(p)
    assert (s["new_traces"], s["bad_lines"]) == (1, 1)
    assert f"skipped: {deep}:2: field '<json>'" in p.stderr and "Traceback" not in p.stderr


def test_grade_and_z3_refuse_a_deeply_nested_line(tmp_path: Path) -> None:
    f = write(tmp_path / "deep.jsonl", {"pred": "18", "gold": "18"}, DEEP)
    out = tmp_path / "o.jsonl"
    assert_error(legival("grade", str(f), "--dataset", "gsm8k", "--out", str(out)),
                 f"{f}:2: field '<json>': JSON nested too deeply")
    assert_error(legival("z3", str(f), "--out", str(out)), f"{f}:2: field '<json>': JSON nested too deeply")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.jsonl"]


def test_grade_refuses_missing_input_and_output_places(tmp_path: Path) -> None:
    f = write(tmp_path / "g.jsonl", {"pred": "18", "gold": "18"})
    assert_error(legival("grade", str(tmp_path / "none.jsonl"), "--dataset", "gsm8k", "--out", str(tmp_path / "o.jsonl")),
                 f"{tmp_path / 'none.jsonl'}: no such file")
    assert_error(legival("grade", str(tmp_path), "--dataset", "gsm8k", "--out", str(tmp_path / "o.jsonl")),
                 f"{tmp_path}: is a directory")
    assert_error(legival("grade", str(f), "--dataset", "gsm8k", "--out", str(tmp_path / "nodir" / "o.jsonl")),
                 "--out", f"{tmp_path / 'nodir'} does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.jsonl"]


@pytest.mark.parametrize("keep", [0.75])
@pytest.mark.parametrize("command", ["ingest", "report", "serve"])
def test_a_truncated_store_is_an_error_line(tmp_path: Path, command: str, keep: float) -> None:
    """A store cut short (a copy interrupted, a full disk): the error may come when the file is opened
    or only when a query reaches a missing page; either way an `error:` line, and the file untouched."""
    full = tmp_path / "full.duckdb"
    summary(legival("ingest", str(SAMPLE), "--db", str(full)))
    data = full.read_bytes()
    db = tmp_path / "cut" / "t.duckdb"
    db.parent.mkdir()
    db.write_bytes(data[: int(len(data) * keep)])
    before = file_state(db)
    args = {"ingest": ["ingest", str(write(tmp_path / "a.jsonl", rec())), "--db", str(db)],
            "report": ["report", "--db", str(db), "--out", str(tmp_path / "rep")],
            "serve": ["serve", "--db", str(db), "--port", "0"]}[command]
    assert_error(legival(*args, timeout=120), str(db), "damaged or truncated")
    assert file_state(db) == before


def test_a_bom_at_the_start_of_a_jsonl_file_is_accepted(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    f = write(tmp_path / "t.jsonl", bom + json.dumps(rec()).encode())
    assert summary(legival("ingest", str(f), "--db", str(tmp_path / "s.duckdb")))["new_traces"] == 1
    g = write(tmp_path / "g.jsonl", bom + json.dumps({"pred": "18", "gold": "18"}).encode())
    assert summary(legival("grade", str(g), "--dataset", "gsm8k", "--out", str(tmp_path / "o.jsonl")))["equivalent"] == 1
    z = write(tmp_path / "z.jsonl", bom + json.dumps({"id": 1}).encode())
    assert summary(legival("z3", str(z), "--out", str(tmp_path / "z.out")))["records"] == 1


# ------------------------------------------------------------------------- 15: z3 options and records


def _fermat() -> dict[str, Any]:
    """x^3 + y^3 = z^3 over positive integers: nonlinear, beyond Z3 (it would run forever unlimited)."""
    def se(track: str, var: str, op: str, a: str, b: str) -> dict[str, Any]:
        return {"track": track, "op": "set_expr", "var": var, "expr": {"op": op, "left": {"var": a}, "right": {"var": b}}}

    steps = [{"track": f"g{i}", "op": "assert_ge", "lhs": {"var": n}, "rhs": {"const": 1}} for i, n in enumerate("xyz")]
    steps += [se("s1", "x2", "mul", "x", "x"), se("s2", "x3", "mul", "x2", "x"), se("s3", "y2", "mul", "y", "y"),
              se("s4", "y3", "mul", "y2", "y"), se("s5", "z2", "mul", "z", "z"), se("s6", "z3", "mul", "z2", "z"),
              se("s7", "lhs", "add", "x3", "y3"),
              {"track": "s8", "op": "assert_eq", "lhs": {"var": "lhs"}, "rhs": {"var": "z3"}}]
    return {"variables": [{"name": n, "type": "Int"} for n in ["x", "y", "z", "x2", "x3", "y2", "y3", "z2", "z3", "lhs"]], "steps": steps}


@pytest.mark.parametrize("value", ["0", "-5"])
def test_z3_refuses_a_timeout_below_one_ms(tmp_path: Path, value: str) -> None:
    f = write(tmp_path / "n.jsonl", {"id": 1, "ir": _fermat()})
    assert_error(legival("z3", str(f), "--out", str(tmp_path / "o.jsonl"), "--timeout-ms", value, timeout=60),
                 "--timeout-ms", f"not {value}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.jsonl"]


def _small_ir(n: int) -> dict[str, Any]:
    return {"variables": [{"name": "x", "type": "Int"}, {"name": "final_answer", "type": "Int"}],
            "steps": [{"track": "s1", "op": "set", "var": "x", "value": n},
                      {"track": "s2", "op": "set_expr", "var": "final_answer",
                       "expr": {"op": "add", "left": {"var": "x"}, "right": {"const": 1}}},
                      {"track": "s3", "op": "assert_eq", "lhs": {"var": "final_answer"}, "rhs": {"const": n + 1}}]}


def test_z3_one_unreadable_constant_does_not_lose_the_batch(tmp_path: Path) -> None:
    huge = _small_ir(1)
    huge["steps"][0]["value"] = 10**400
    records = [{"id": i, "ir": _small_ir(i)} for i in range(16)]
    records.insert(5, {"id": "huge", "ir": huge})
    f = write(tmp_path / "in.jsonl", *records)
    out = tmp_path / "out.jsonl"
    s = summary(legival("z3", str(f), "--out", str(out)))
    got = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert s["records"] == len(got) == 17 and [g["id"] for g in got] == [r["id"] for r in records]
    assert all(g["z3_status"] == "sat" and g["acs"] == 1.0 for g in got if g["id"] != "huge")
    bad = got[5]
    assert bad["z3_skipped_steps"] and "number too large" in bad["z3_skipped_steps"][0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]


# ------------------------------------------------------------------------- 18: bare answers


def test_grade_reads_bare_answers_as_answers(tmp_path: Path) -> None:
    recs = [{"pred": "\\frac{1}{2}", "gold": "0.5"}, {"pred": "\\boxed{\\frac12}", "gold": "\\frac{1}{2}"},
            {"pred": "3", "gold": "4"}, {"pred": "no answer here", "gold": "4"}]
    f = write(tmp_path / "m.jsonl", *recs)
    out = tmp_path / "o.jsonl"
    s = summary(legival("grade", str(f), "--dataset", "math", "--out", str(out)))
    got = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [g["equivalent"] for g in got] == [True, True, False, False]
    assert [g["grade_status"] for g in got] == ["ok", "ok", "ok", "unparsed"]
    assert [g["pred_read_as"] for g in got] == ["answer", "response", "answer", "response"]
    assert (s["pred_format"], s["read_as_answer"], s["read_as_response"]) == ("auto", 2, 2)
    s = summary(legival("grade", str(f), "--dataset", "math", "--out", str(out), "--pred-format", "response"))
    assert s["equivalent"] == 1 and s["unparsed"] == 3
    assert_error(legival("grade", str(f), "--dataset", "math", "--out", str(out), "--pred-format", "bare"),
                 "--pred-format", "answer, response, auto")


def test_an_unwritable_output_place_is_an_error_before_any_work(db: Path, tmp_path: Path) -> None:
    """`--out` under a regular file (no directory can be made there): one error line naming the option
    and the place, exit 2, the store unchanged; `legival run` says so before a flow starts."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory\n")
    before = snapshot(db)
    assert_error(legival("report", "--db", str(db), "--out", str(blocker / "rep")), "--out", "cannot write there",
                 str(blocker / "rep"))
    assert_error(legival("diff", "--db", str(db), "--out", str(blocker / "diff.csv")), "--out", "cannot write there")
    for command in (["rm"], ["monitor", "--supervisor", "smollm2"]):  # long commands: refused before any model loads
        assert_error(legival(*command, "--db", str(db), "--out", str(blocker / command[0])), "--out",
                     "cannot write there")
    taken = tmp_path / "rep"
    (taken / "teacher_metrics.csv").mkdir(parents=True)  # a directory where a report file goes
    assert_error(legival("report", "--db", str(db), "--out", str(taken)), "--out", "cannot write the report")
    assert snapshot(db) == before
    spec = REPO / "examples" / "demo.yaml"
    assert_error(legival("run", str(spec), "--db", str(tmp_path / "run.duckdb"), "--out", str(blocker / "rep")),
                 "--out", "cannot write there")
    assert not (tmp_path / "run.duckdb").exists()  # refused before the store is created
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".legival")) == []


def test_report_on_a_store_without_traces_says_what_to_do(tmp_path: Path) -> None:
    """A first ingest that was refused leaves no store behind (it created it and stored nothing); an
    empty store (one made another way) given to `report` (the order a new user may try) is one error
    line pointing at ingest or run, not a plotting traceback, and writes no file."""
    bad = tmp_path / "no_model.jsonl"
    bad.write_text(json.dumps({"dataset": "gsm8k", "problem_id": "gsm8k-test-1", "problem": "q",
                               "gold_answer": "1", "reasoning": "r.", "response": "\\boxed{1}"}) + "\n")
    db = tmp_path / "s.duckdb"
    assert_error(legival("ingest", str(bad), "--db", str(db)), "no_model.jsonl:1", "'model'")
    assert not db.exists()
    assert_error(legival("report", "--db", str(db), "--out", str(tmp_path / "rep")), "no such store", "legival ingest")
    with Store(db):
        pass  # an empty store
    line = assert_error(legival("report", "--db", str(db), "--out", str(tmp_path / "rep")), "no traces stored yet",
                        "legival ingest FILE --db")
    assert str(db) in line
    assert not (tmp_path / "rep").exists()
