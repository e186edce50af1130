"""The input boundary (issue 26): text is validated once, at ingest, with errors naming file, line and
field; `--repair-text` repairs and counts; a trace over the size limit is skipped and counted;
duplicate keys (JSON) and duplicate columns (Parquet) are errors. Nothing stored is lost."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from legival_core.readers.trace_records import DEFAULT_LIMITS, checked_text
from legival_core.store import Store
from tests._cli import legival
from tests._sql import rows

BASE = {"model": "t1", "dataset": "gsm8k", "problem_id": "1", "problem": "What is 1+1?", "gold_answer": "2",
        "reasoning": "One plus one is two.", "response": "The answer is 2."}
BAD = {"lone surrogate U+D800": "\ud800", "lone surrogate U+DFFF": "\udfff", "NUL U+0000": "\x00",
       "non-character U+FFFE": "\ufffe", "non-character U+FDD0": "\ufdd0", "non-character U+10FFFF": "\U0010ffff"}


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")  # \ud800 -> "\\ud800"
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    p = legival("ingest", write_jsonl(tmp_path / "first.jsonl", [BASE]), "--db", path)
    assert p.returncode == 0, p.stderr
    return path


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("field", ["reasoning", "problem", "gold_answer", "response", "model", "extra.nested[1]"])
def test_invalid_unicode_in_any_field_is_an_error_naming_it(db: Path, tmp_path: Path, kind: str, field: str) -> None:
    rec: dict[str, Any] = {**BASE, "problem_id": "2"}
    bad = f"ok {BAD[kind]} tail"
    if field == "extra.nested[1]":
        rec["extra"] = {"nested": ["fine", bad]}
    else:
        rec[field] = bad
    before = digest(db)
    p = legival("ingest", write_jsonl(tmp_path / "bad.jsonl", [BASE, rec]), "--db", db)
    line = p.error()
    assert f"bad.jsonl:2: field '{field}': invalid Unicode: " in line, line
    assert kind.replace("non-character", "a Unicode non-character").replace("lone", "a lone") in line, line
    assert "at character 4" in line and "--repair-text" in line and "nothing from this file was stored" in line
    assert digest(db) == before


def test_invalid_unicode_in_a_key_is_an_error(db: Path, tmp_path: Path) -> None:
    p = legival("ingest", write_jsonl(tmp_path / "k.jsonl", [{**BASE, "problem_id": "3", "meta\ud800": 1}]), "--db", db)
    assert "k.jsonl:1: field '<key>': invalid Unicode: a lone surrogate U+D800" in p.error()


def test_repair_text_replaces_and_counts_and_the_text_is_stored(db: Path, tmp_path: Path) -> None:
    recs = [{**BASE, "problem_id": "5", "reasoning": "a \ud83d b \x00 c"},  # a high surrogate without its pair
            {**BASE, "problem_id": "6", "meta": {"x": "\ufffe"}},
            {**BASE, "problem_id": "7"}]
    p = legival("ingest", write_jsonl(tmp_path / "r.jsonl", recs), "--db", db, "--repair-text")
    assert p.returncode == 0, p.stderr
    assert (p.summary()["repaired_text"], p.summary()["new_traces"]) == (2, 3)
    with Store(db, read_only=True) as s:
        texts = dict(rows(s, "SELECT problem_id, reasoning FROM traces"))
    assert texts["5"] == "a \ufffd b \ufffd c"
    again = legival("ingest", tmp_path / "r.jsonl", "--db", db, "--repair-text")  # the same ids: nothing new
    assert again.summary()["new_traces"] == 0 and again.summary()["already_stored"] == 3


def test_a_valid_surrogate_pair_is_text_not_an_error(db: Path, tmp_path: Path) -> None:
    p = legival("ingest", write_jsonl(tmp_path / "e.jsonl", [{**BASE, "problem_id": "8", "reasoning": "ok \U0001f600"}]),
                "--db", db)
    assert p.returncode == 0 and p.summary()["repaired_text"] == 0, p.stderr


@pytest.mark.parametrize("limit", [None, "1000"])
def test_a_trace_over_the_size_limit_is_skipped_and_counted(db: Path, tmp_path: Path, limit: str | None) -> None:
    size = DEFAULT_LIMITS.max_trace_bytes + 1 if limit is None else 1001
    recs = [{**BASE, "problem_id": "9", "reasoning": "é" * (size // 2 - 8) + "x" * 100}, {**BASE, "problem_id": "10"}]
    args = [] if limit is None else ["--max-trace-bytes", limit]
    p = legival("ingest", write_jsonl(tmp_path / "big.jsonl", recs), "--db", db, *args)
    assert p.returncode == 0, p.stderr
    assert (p.summary()["too_large"], p.summary()["new_traces"]) == (1, 1)
    (skip,) = [ln for ln in p.stderr.splitlines() if ln.startswith("skipped: ")]
    assert "big.jsonl:1: field 'reasoning': " in skip and "bytes of reasoning and answer, over the limit" in skip
    assert "Traceback" not in p.stderr


def test_duplicate_keys_are_an_error_at_any_depth(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "dup.jsonl"
    f.write_text(json.dumps(BASE) + "\n" + '{"model": "t1", "meta": {"a": 1, "a": 2}}\n', encoding="utf-8")
    assert "dup.jsonl:2: field 'meta': duplicate key 'a'" in legival("ingest", f, "--db", db).error()  # names the object


def test_parquet_rows_are_checked_the_same_way(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([BASE, {**BASE, "problem_id": "11", "reasoning": "nul \x00 inside"}]), f)
    assert "t.parquet row 2: field 'reasoning': invalid Unicode: NUL U+0000" in legival("ingest", f, "--db", db).error()
    dup = tmp_path / "dup.parquet"
    pq.write_table(pa.table([pa.array(["a"]), pa.array(["b"])], names=["model", "model"]), dup)
    assert "duplicate column(s) 'model'" in legival("ingest", dup, "--db", db).error()


def test_checked_text_returns_the_same_object_when_clean() -> None:
    rec = {"a": ["x", {"b": "y"}], "n": 1}
    assert checked_text(rec, "f", 1, "line", repair=False) == (rec, False)
    assert checked_text(rec, "f", 1, "line", repair=False)[0] is rec
