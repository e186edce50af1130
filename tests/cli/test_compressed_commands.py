"""Input files as users have them (issue 38, item 8), for the commands that read a user's records
besides `legival ingest` (tests/cli/test_compressed_inputs.py): `legival grade FILE`, `legival z3
FILE`, `legival judge-agreement --human FILE` and `legival generate --problems FILE`.

Each reads gzip- and zstd-compressed input as it reads the plain file (same output, same summary),
refuses any other container in ONE `error:` line naming the file once, saying what it is and what is
read (exit 2, no output written), and says so when the file holds nothing. The compressed files are
made by the real tools (gzip, zstandard, zipfile, tarfile).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import zstandard

from legival_core.stages.ingest import ingest_file
from legival_core.store import Store
from tests._cli import Ran, legival
from tests._sql import rows
from tests.conftest import EXAMPLES, FIXTURES

JSONL_READ = "this command reads JSONL, plain or compressed with gzip or zstd)"


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def zipped(data: bytes, name: str = "records.jsonl") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return buf.getvalue()


def tar_gz(data: bytes, name: str = "records.jsonl") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


COMPRESSED = {"gz": gzip.compress, "zst": zstd}


def ok(p: Ran) -> dict[str, Any]:
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.returncode, p.stderr[-3000:])
    assert not [ln for ln in p.stderr.splitlines() if ln.startswith(("warning: ", "error: "))], p.stderr
    return p.summary()


def warned(p: Ran) -> list[str]:
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.returncode, p.stderr[-3000:])
    return [ln for ln in p.stderr.splitlines() if ln.startswith("warning: ")]


def refused(p: Ran, f: Path, says: str) -> str:
    """The one error line: `error: FILE: what it is...` or `error: FILE:LINE: ...` (`says` begins with
    ': ' or ':LINE: '), the file named once."""
    line = p.error(f"error: {f}{says}")
    assert line.count(str(f)) == 1, line
    return line


# ------------------------------------------------------------------------------------ legival grade

GRADE = "".join(json.dumps({"id": i, "pred": f"The answer is {i}.", "gold": str(i if i % 3 else i + 1)}) + "\n"
                for i in range(9)).encode()


@pytest.mark.parametrize("kind", list(COMPRESSED))
def test_grade_reads_compressed_records_as_the_plain_file(tmp_path: Path, kind: str) -> None:
    plain, packed = tmp_path / "p.jsonl", tmp_path / f"p.jsonl.{kind}"
    plain.write_bytes(GRADE)
    packed.write_bytes(COMPRESSED[kind](GRADE))
    want = ok(legival("grade", plain, "--dataset", "gsm8k", "--out", tmp_path / "a.jsonl"))
    got = ok(legival("grade", packed, "--dataset", "gsm8k", "--out", tmp_path / "b.jsonl"))
    assert {k: v for k, v in got.items() if k not in ("out", "wall_s")} == \
           {k: v for k, v in want.items() if k not in ("out", "wall_s")}
    assert (want["records"], want["equivalent"]) == (9, 6)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


@pytest.mark.parametrize("name, make, says", [
    ("p.zip", zipped, "is a zip archive, which is not read here (extract it and give the files in it; " + JSONL_READ),
    ("p.tar.gz", tar_gz, "is a gzip-compressed tar archive, which is not read here"),
])
def test_grade_names_an_archive_and_writes_nothing(tmp_path: Path, name: str, make: Any, says: str) -> None:
    f = tmp_path / name
    f.write_bytes(make(GRADE))
    line = refused(legival("grade", f, "--dataset", "gsm8k", "--out", tmp_path / "o.jsonl"), f, ": " + says)
    assert "extract it" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_grade_names_a_bad_line_inside_a_compressed_file_and_a_cut_stream(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl.zst"
    f.write_bytes(zstd(GRADE + b'{"pred": "1"}\n'))
    refused(legival("grade", f, "--dataset", "gsm8k", "--out", tmp_path / "o.jsonl"), f,
            ":10: field 'gold': required field is missing")
    f.write_bytes(gzip.compress(GRADE)[:-8])  # deliberately truncated: the gzip trailer (CRC, size) is missing
    refused(legival("grade", f, "--dataset", "gsm8k", "--out", tmp_path / "o.jsonl"), f,
            ": the gzip stream ends early, after line 9 (a truncated file?")
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("content", [b"", b"\n \n", gzip.compress(b"")], ids=["empty", "blank", "empty-gzip"])
def test_grade_of_a_file_with_no_records_writes_an_empty_output(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "p.jsonl"
    f.write_bytes(content)
    p = legival("grade", f, "--dataset", "gsm8k", "--out", tmp_path / "o.jsonl")
    assert p.returncode == 0 and p.summary()["records"] == 0, p.stderr
    assert (tmp_path / "o.jsonl").read_bytes() == b""


def test_grade_of_a_file_with_no_records_says_so(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl.gz"
    f.write_bytes(gzip.compress(b"\n"))
    p = legival("grade", f, "--dataset", "gsm8k", "--out", tmp_path / "o.jsonl")
    assert [ln for ln in warned(p) if f"{f}: no records" in ln], p.stderr


# --------------------------------------------------------------------------------------- legival z3

Z3 = (FIXTURES / "z3" / "human_eval_gsm8k_acs_sample.jsonl").read_bytes()


@pytest.mark.parametrize("kind", list(COMPRESSED))
def test_z3_reads_compressed_records_as_the_plain_file(tmp_path: Path, kind: str) -> None:
    plain, packed = tmp_path / "z.jsonl", tmp_path / f"z.jsonl.{kind}"
    plain.write_bytes(Z3)
    packed.write_bytes(COMPRESSED[kind](Z3))
    want = ok(legival("z3", plain, "--out", tmp_path / "a.jsonl"))
    got = ok(legival("z3", packed, "--out", tmp_path / "b.jsonl"))
    assert got["records"] == want["records"] == Z3.count(b"\n") and got["z3_status"] == want["z3_status"]
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_z3_names_an_archive_and_says_when_there_is_nothing(tmp_path: Path) -> None:
    f = tmp_path / "z.zip"
    f.write_bytes(zipped(Z3))
    refused(legival("z3", f, "--out", tmp_path / "o.jsonl"), f, ": is a zip archive, which is not read here")
    assert not (tmp_path / "o.jsonl").exists()
    empty = tmp_path / "empty.jsonl.zst"
    empty.write_bytes(zstd(b"\n\n"))
    p = legival("z3", empty, "--out", tmp_path / "o.jsonl")
    assert warned(p) == [f"warning: {empty}: no records (the file is empty or holds only blank lines); "
                         f"{tmp_path / 'o.jsonl'} will be empty"]
    assert p.summary()["records"] == 0 and (tmp_path / "o.jsonl").read_bytes() == b""


# ------------------------------------------------------------------------- legival judge-agreement


@pytest.fixture
def judged(tmp_path: Path) -> tuple[Path, list[str]]:
    """A store with judge counts 0, 1, 2, 3 for four traces: (store, their trace ids)."""
    db = tmp_path / "j.duckdb"
    with Store(db) as st:
        ingest_file(st, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
        ids = [r[0] for r in rows(st, "SELECT trace_id FROM traces ORDER BY trace_id LIMIT 4")]
        st.insert_rows("judge_results", [
            {"trace_id": t, "judge_key": "k" * 32, "judge": "gemini", "model": "g", "prompt_version": "v",
             "status": "ok", "m": 10, "flagged_steps": json.dumps(list(range(n))), "fraction": n / 10}
            for n, t in enumerate(ids)])
    return db, ids


def human_rows(ids: list[str]) -> list[dict[str, Any]]:
    return [{"trace_id": t, "annotator": a, "count": c}
            for a, counts in (("A", [0, 1, 3, 2]), ("B", [0, 0, 2, 3])) for t, c in zip(ids, counts, strict=True)]


def as_csv(records: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["trace_id", "annotator", "count"])
    w.writeheader()
    w.writerows(records)
    return buf.getvalue().encode()


def as_jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def agreement_of(p: Ran) -> dict[str, Any]:
    return {k: v for k, v in ok(p).items() if k != "wall_s"}


@pytest.mark.parametrize("name", ["h.jsonl.gz", "h.jsonl.zst", "h.csv.gz", "h.csv.zst", "h.ndjson.gz"])
def test_judge_agreement_reads_compressed_annotations(judged: tuple[Path, list[str]], tmp_path: Path,
                                                      name: str) -> None:
    db, ids = judged
    data = (as_csv if ".csv" in name else as_jsonl)(human_rows(ids))
    plain = tmp_path / name.rsplit(".", 1)[0]
    plain.write_bytes(data)
    packed = tmp_path / name
    packed.write_bytes(COMPRESSED[name.rsplit(".", 1)[1]](data))
    want = agreement_of(legival("judge-agreement", "--human", plain, "--db", db))
    assert (want["annotations"], want["n_traces"]) == (8, 4)
    assert agreement_of(legival("judge-agreement", "--human", packed, "--db", db)) == want


@pytest.mark.parametrize("name, content, says", [
    ("h.jsonl", zipped(b"{}\n"), "is a zip archive, which is not read here (extract it and give the files in it; "
                                 "this command reads CSV or JSONL, plain or compressed with gzip or zstd)"),
    ("h.csv.gz", tar_gz(b"trace_id\n", "h.csv"), "is a gzip-compressed tar archive, which is not read here"),
    ("h.zip", zipped(b"{}\n", "h.csv"), "is a zip archive, which is not read here"),  # told by content, not name
    ("h.jsonl", b"", "no annotations (the file holds only blank lines or nothing): there is nothing to compare"),
    ("h.jsonl.zst", zstd(b"\n\n"), "no annotations (the file holds only blank lines or nothing)"),
    ("h.csv", b"trace_id,annotator,count\r\n", "no annotations (the file holds only a header or nothing)"),
    ("h.jsonl.gz", gzip.compress(b'{"trace_id": "t", "annotator": "a", "count": 1}\n{oops\n'),
     ":2: field '<json>': malformed JSON"),
    ("h.jsonl", b'{"trace_id": "t", "annotator": "a", "count": "many"}\n',
     ":1: field 'count': expected a whole number, got 'many'"),
    ("h.csv.bz2", b"", "expected a .csv or .jsonl file (plain, or compressed with gzip or zstd"),
])
def test_judge_agreement_refuses_what_it_cannot_read_in_one_line(judged: tuple[Path, list[str]], tmp_path: Path,
                                                                 name: str, content: bytes, says: str) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    line = legival("judge-agreement", "--human", f, "--db", judged[0]).error(str(f), says)
    assert line.startswith(f"error: {f}"), line


def test_judge_agreement_names_the_file_once(judged: tuple[Path, list[str]], tmp_path: Path) -> None:
    f = tmp_path / "h.zip"
    f.write_bytes(zipped(b"{}\n"))
    refused(legival("judge-agreement", "--human", f, "--db", judged[0]), f, ": is a zip archive")


# ------------------------------------------------------------------------------- legival generate

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"


def generate(tmp_path: Path, problems: Path, dataset: str = "gsm8k") -> Ran:
    cfg = tmp_path / "demo.yaml"
    cfg.write_text("name: demo\nmodel: scripted-demo\ndecoding: {max_new_tokens: 7}\n", encoding="utf-8")
    return legival("generate", "--db", tmp_path / "g.duckdb", "--teacher", "demo", "--dataset", dataset,
                   "--limit", "2", "--backend", "scripted-demo", "--config", cfg, "--problems", problems)


def stored_problem_ids(db: Path) -> list[str]:
    with Store(db, read_only=True) as s:
        return sorted(r[0] for r in rows(s, "SELECT problem_id FROM traces"))


def test_generate_stores_a_compressed_files_problems_under_the_plain_files_ids(tmp_path: Path) -> None:
    f = tmp_path / "test.jsonl.zst"
    f.write_bytes(zstd(GSM8K.read_bytes()))
    assert ok(generate(tmp_path, f))["generated"] == 2
    assert stored_problem_ids(tmp_path / "g.duckdb") == ["gsm8k-test-0", "gsm8k-test-1"]


@pytest.mark.parametrize("content", [b"", b"\n\n", gzip.compress(b" \n")], ids=["empty", "blank", "blank-gzip"])
def test_generate_from_a_problems_file_with_no_problems_says_so(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "test.jsonl"
    f.write_bytes(content)
    p = generate(tmp_path, f)
    assert warned(p) == [f"warning: {f}: no problems (the file holds no record): nothing to generate"]
    assert p.summary()["generated"] == 0


@pytest.mark.parametrize("dataset, name, make, says", [
    ("gsm8k", "test.zip", zipped, "is a zip archive, which is not read here (extract it and give the files in it; "
                                  + JSONL_READ),
    ("gsm8k", "test.jsonl", lambda d: gzip.compress(gzip.compress(d)), "is gzip-compressed data compressed twice"),
    ("gpqa", "gpqa.zip", lambda d: zipped(d, "gpqa.csv"),
     "is a zip archive, which is not read here (extract it and give the files in it; the gpqa loader reads CSV, "
     "plain or compressed with gzip or zstd)"),
])
def test_generate_names_an_archive_once(tmp_path: Path, dataset: str, name: str, make: Any, says: str) -> None:
    f = tmp_path / name
    f.write_bytes(make((GSM8K if dataset == "gsm8k" else FIXTURES / "datasets" / "gpqa.csv").read_bytes()))
    refused(generate(tmp_path, f, dataset), f, ": " + says)
    assert not (tmp_path / "g.duckdb").exists()


def test_generate_names_a_bad_problem_line_once(tmp_path: Path) -> None:
    f = tmp_path / "test.jsonl.gz"
    f.write_bytes(gzip.compress(GSM8K.read_bytes() + b'{"question": "q", "answer": "no hashes"}\n'))
    n = GSM8K.read_bytes().count(b"\n") + 1
    refused(generate(tmp_path, f), f, f":{n}: field 'answer' has no '#### <number>'")
