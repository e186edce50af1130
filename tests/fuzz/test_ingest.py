"""Fuzzing the ingest parser (`legival_core/readers/trace_records.py`, `readers/records.py`): a trace file
is untrusted model output.

Any bytes of a JSONL line -> a record or a `LineProblem` (never an exception); any record (strings with
every code point, surrogates and NUL included, any nesting, odd types) -> a `ParsedLine` or an
`IngestError` naming the line and a field; a parsed trace's text is encodable (content hashes and UTF-8
writers never fail downstream), and `--repair-text` never refuses a record for its text. Parquet rows
read back from a real file go through the same parser. Any file content, plain or gzip/zstd-compressed,
is records and line errors or ONE file-level error; a compressed file cut anywhere yields a prefix of
its records, then the file-level error.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import example, given
from hypothesis import strategies as st

from legival_core.readers.records import LineProblem, parse_json_line
from legival_core.readers.trace_records import IngestError, ParsedLine, parse_record, read_records
from legival_core.run_config import Ingest
from tests.fuzz._text import ANY_CHAR
from tests.fuzz._values import SCALARS, json_values
from tests.fuzz.conftest import fuzz

pytestmark = pytest.mark.timeout(120, method="thread")

BASE = {"model": "t", "dataset": "gsm8k", "problem_id": "1", "problem": "q?", "gold_answer": "2",
        "reasoning": "r", "response": "2"}
TEXT = st.text(ANY_CHAR, max_size=40)
FIELDS = st.sampled_from([*BASE, "meta", "trace_id", "correct", "truncated", "choices", "output"])


def check(p: ParsedLine) -> None:
    for s in (p.trace.reasoning, p.trace.answer_text, p.problem.question, p.problem.gold, p.trace.provenance or ""):
        s.encode("utf-8")  # never a lone surrogate past the boundary
        assert "\x00" not in s
    assert p.trace.trace_id


@fuzz(300)
@given(st.binary(max_size=200))
@example(b'{"a": 1, "a": 2}')
@example(b'{"x": "\\ud800"}')
@example(b"[" * 5000)
def test_any_bytes_are_a_record_or_a_line_problem(raw: bytes) -> None:
    out = parse_json_line(raw, 7)
    assert isinstance(out, dict) or (isinstance(out, LineProblem) and out.line == 7)


@fuzz(300)
@given(st.dictionaries(FIELDS, st.one_of(TEXT, SCALARS, json_values(TEXT)), max_size=6), st.booleans())
@example({"reasoning": "\ud800"}, False)
@example({"problem": "a\x00b"}, True)
@example({"meta": {"\udfff": ["\ufffe"]}}, False)
@example({"meta": 10**5000}, False)  # found by this test: canonical_json raised ValueError
def test_any_record_is_parsed_or_an_error_naming_line_and_field(changes: dict[str, Any], repair: bool) -> None:
    rec = {**BASE, **changes}
    try:
        p = parse_record(rec, "f.jsonl", 3, limits=Ingest(repair_text=repair))
    except IngestError as e:
        assert e.line == 3 and e.field and str(e).startswith("f.jsonl:3: field ")
        assert not (repair and "invalid Unicode" in e.message)
        return
    check(p)


@fuzz(60, deadline_s=10)
@given(st.lists(st.dictionaries(st.sampled_from(list(BASE)), st.text(ANY_CHAR.filter(lambda c: not 0xD800 <= ord(c) <= 0xDFFF),
                                                                     max_size=20), max_size=7), min_size=1, max_size=4))
def test_parquet_rows_go_through_the_same_parser(tmp_path_factory: pytest.TempPathFactory,
                                                 records: list[dict[str, Any]]) -> None:
    path = Path(tmp_path_factory.mktemp("pq")) / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{**BASE, **r} for r in records]), path)
    for line, rec in read_records(path):
        if isinstance(rec, IngestError):
            continue
        try:
            check(parse_record(rec, str(path), line, unit="row"))
        except IngestError as e:
            assert e.line == line and " row " in str(e)


def test_a_record_as_json_round_trips_through_the_line_parser() -> None:
    rec = {**BASE, "reasoning": "a \U0001f600 b"}
    parsed = parse_json_line(json.dumps(rec).encode(), 1)
    assert parsed == rec


COMPRESS = {"plain": lambda d: d, "gzip": gzip.compress, "zstd": lambda d: zstandard.ZstdCompressor().compress(d)}


@fuzz(150)
@given(st.binary(max_size=600), st.sampled_from(list(COMPRESS)), st.sampled_from(["t.jsonl", "t.parquet", "t.gz"]))
@example(b"PAR1", "plain", "t.parquet")
@example(b"PK\x05\x06" + bytes(18), "gzip", "t.jsonl")
@example(b"\x1f\x8b", "plain", "t.jsonl")
@example(b"\x28\xb5\x2f\xfd\x00", "plain", "t.gz")
def test_any_file_is_records_and_line_errors_or_one_file_error(tmp_path_factory: pytest.TempPathFactory,
                                                              content: bytes, kind: str, name: str) -> None:
    path = Path(tmp_path_factory.mktemp("any")) / name
    path.write_bytes(COMPRESS[kind](content))
    try:
        for line, rec in read_records(path):
            assert line >= 1 and (isinstance(rec, dict) or (isinstance(rec, IngestError) and rec.line == line))
    except IngestError as e:
        assert e.unit == "file" and str(e).startswith(f"{path}: ") and "\n" not in str(e), str(e)


@fuzz(60, deadline_s=10)
@given(st.lists(st.dictionaries(st.sampled_from(list(BASE)), st.text(max_size=30), max_size=7), min_size=1, max_size=30),
       st.sampled_from(["gzip", "zstd"]), st.floats(0.0, 1.0))
@example([{}], "gzip", 0.001)
@example([{}], "zstd", 0.999)
def test_a_cut_compressed_file_yields_a_prefix_of_its_records_then_a_file_error(
        tmp_path_factory: pytest.TempPathFactory, records: list[dict[str, Any]], kind: str, keep: float) -> None:
    data = "".join(json.dumps({**BASE, **r}) + "\n" for r in records).encode()
    whole = COMPRESS[kind](data)
    path = Path(tmp_path_factory.mktemp("cut")) / "t.jsonl"
    path.write_bytes(whole)
    full = list(read_records(path))
    assert len(full) == len(records)
    cut = 0 if keep == 0 else max(4, int(len(whole) * keep))  # shorter, not even its magic bytes are left
    path.write_bytes(whole[:cut])  # deliberately truncated
    got: list[Any] = []
    try:
        got.extend(read_records(path))
    except IngestError as e:
        assert e.unit == "file" and f"{path}: the {kind} stream ends early, " in str(e), str(e)
    else:
        assert cut in (0, len(whole)), "a cut stream read as complete"
    assert got == full[: len(got)]
