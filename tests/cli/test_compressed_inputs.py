"""Input files as users have them (issue 38, item 8): trace dumps are large and usually compressed.

gzip and zstd JSONL are read transparently, told by their first bytes, not their names (a gzip file
named .jsonl, a plain file named .gz), and store exactly what the plain file stores. Any other
container (zip, tar, .tar.gz, bzip2, xz, a Parquet file named .jsonl, a DuckDB store, UTF-16 text,
binary data) is ONE `error:` line naming the file, what it is and what is read, exit 2, nothing
stored. A compressed stream cut short is an error naming the line reached. A file with no record
(empty, blank lines only, an empty compressed stream, a Parquet file of 0 rows) is accepted with a
`warning:` line naming it, and `new_traces: 0` in its summary entry. Every file here is made by the
real tool (gzip, zstandard, zipfile, tarfile, bz2, lzma, pyarrow); only the truncated ones are cut by
hand.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from legival_core.store import Store
from tests._cli import Ran, legival
from tests._sql import rows
from tests.conftest import FIXTURES

BASE = {"model": "t1", "dataset": "gsm8k", "problem": "What is 1+1?", "gold_answer": "2",
        "reasoning": "One plus one is two.", "response": "The answer is 2."}
N = 8
PLAIN = "".join(json.dumps({**BASE, "problem_id": str(i)}) + "\n" for i in range(N)).encode()
SUPPORTED = "this command reads JSONL, plain or compressed with gzip or zstd, and Parquet"


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def tar(data: bytes, mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:  # type: ignore[call-overload]
        info = tarfile.TarInfo("traces.jsonl")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zipped(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("traces.jsonl", data)
    return buf.getvalue()


def parquet(records: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records, schema=pa.Table.from_pylist([{**BASE, "problem_id": "0"}]).schema), buf)
    return buf.getvalue()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored(db: Path) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        return sorted(rows(s, "SELECT trace_id, source_line FROM traces"))


@pytest.fixture(scope="module")
def plain_rows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    """What the plain file stores: the reference every compressed form must match."""
    d = tmp_path_factory.mktemp("plain")
    (d / "t.jsonl").write_bytes(PLAIN)
    p = legival("ingest", d / "t.jsonl", "--db", d / "s.duckdb")
    assert p.returncode == 0 and p.summary()["new_traces"] == N, p.stderr
    return stored(d / "s.duckdb")


READABLE: dict[str, Callable[[bytes], bytes]] = {
    "t.jsonl.gz": gzip.compress,
    "t.jsonl.zst": zstd,
    "gzip-named-plainly.jsonl": gzip.compress,  # told by content, not by name
    "zstd-named-plainly.jsonl": zstd,
    "plain-named.jsonl.gz": lambda d: d,
    "two-members.jsonl.gz": lambda d: gzip.compress(d[:200]) + gzip.compress(d[200:]),  # `cat a.gz b.gz`
    "two-frames.jsonl.zst": lambda d: zstd(d[:200]) + zstd(d[200:]),  # frames appended, as `zstd >>` writes
    "bom.jsonl.gz": lambda d: gzip.compress(b"\xef\xbb\xbf" + d),
    "crlf.jsonl.zst": lambda d: zstd(d.replace(b"\n", b"\r\n")),
}


@pytest.mark.parametrize("name", list(READABLE))
def test_compressed_jsonl_stores_what_the_plain_file_stores(tmp_path: Path, plain_rows: list[Any], name: str) -> None:
    f = tmp_path / name
    f.write_bytes(READABLE[name](PLAIN))
    p = legival("ingest", f, "--db", tmp_path / "s.duckdb")
    assert p.returncode == 0 and "Traceback" not in p.stderr and "warning" not in p.stderr, p.stderr
    assert (p.summary()["new_traces"], p.summary()["files"][0]["lines"]) == (N, N)
    assert stored(tmp_path / "s.duckdb") == plain_rows


@pytest.mark.parametrize("kind", ["plain", "gzip", "zstd"])
def test_a_pipe_is_read_once_compressed_or_not(tmp_path: Path, plain_rows: list[Any], kind: str) -> None:
    """`legival ingest <(zcat traces.jsonl.gz)` or a named pipe: the first bytes that tell what the
    file is are read once and replayed (a pipe cannot be opened twice)."""
    fifo = tmp_path / "traces.jsonl"
    os.mkfifo(fifo)
    data = {"plain": PLAIN, "gzip": gzip.compress(PLAIN), "zstd": zstd(PLAIN)}[kind]
    writer = threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True)
    writer.start()  # blocks in open() until the command opens the pipe for reading
    p = legival("ingest", fifo, "--db", tmp_path / "s.duckdb")
    if writer.is_alive():  # the command never read the pipe: release the writer
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(30)
    assert p.returncode == 0 and p.summary()["new_traces"] == N, p.stderr
    assert stored(tmp_path / "s.duckdb") == plain_rows


def test_bad_lines_inside_a_compressed_file_are_named_by_line(tmp_path: Path) -> None:
    lines = PLAIN.split(b"\n")
    lines[3] = b'{"model": "t1", "dataset": '
    f = tmp_path / "t.jsonl.zst"
    f.write_bytes(zstd(b"\n".join(lines)))
    legival("ingest", f, "--db", tmp_path / "s.duckdb").error(f"{f}:4: field '<json>': malformed JSON")
    p = legival("ingest", f, "--db", tmp_path / "s.duckdb", "--skip-bad")
    assert (p.summary()["new_traces"], p.summary()["bad_lines"]) == (N - 1, 1)


UNREADABLE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "t.zip": (zipped, "is a zip archive, which is not read here (extract it"),
    "t.tar": (tar, "is a tar archive, which is not read here (extract it"),
    "t.tar.gz": (lambda d: tar(d, "w:gz"), "is a gzip-compressed tar archive, which is not read here (extract it"),
    "t.tar.zst": (lambda d: zstd(tar(d)), "is a zstd-compressed tar archive"),
    "t.jsonl.bz2": (bz2.compress, "is bzip2-compressed data, which is not read here (decompress it, or recompress "
                                  "it with gzip or zstd"),
    "t.jsonl.xz": (lzma.compress, "is xz-compressed data, which is not read here"),
    "t.jsonl.gz.gz": (lambda d: gzip.compress(gzip.compress(d)), "is gzip-compressed data compressed twice"),
    "parquet.jsonl": (lambda d: parquet([json.loads(x) for x in d.splitlines()]),
                      "is a Parquet file named like JSONL: name it *.parquet (or *.pq)"),
    "t.parquet.gz": (lambda d: gzip.compress(parquet([json.loads(x) for x in d.splitlines()])),
                     "is gzip-compressed Parquet, which is not read here (decompress it: Parquet compresses"),
    "jsonl.parquet": (lambda d: d, "is named like Parquet but holds text, not Parquet (JSONL? name it *.jsonl)"),
    "utf16.jsonl": (lambda d: d.decode().encode("utf-16"), "is UTF-16 text, which is not read here (save it as UTF-8"),
    "random.jsonl": (lambda d: random.Random(0).randbytes(4096), "is binary data, which is not read here"),
}


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_other_containers_are_one_error_line_saying_what_the_file_is(tmp_path: Path, name: str) -> None:
    db = tmp_path / "s.duckdb"
    (tmp_path / "first.jsonl").write_bytes(PLAIN)
    assert legival("ingest", tmp_path / "first.jsonl", "--db", db).returncode == 0
    before = digest(db)
    make, says = UNREADABLE[name]
    f = tmp_path / name
    f.write_bytes(make(PLAIN))
    for extra in ((), ("--skip-bad",)):
        line = legival("ingest", f, "--db", db, *extra).error(f"error: {f}: {says}", "nothing from this file was stored")
        assert SUPPORTED in line or "name it" in line, line
    assert digest(db) == before


def test_a_store_given_as_a_trace_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_bytes(PLAIN)
    db = tmp_path / "s.duckdb"
    assert legival("ingest", tmp_path / "t.jsonl", "--db", db).returncode == 0
    legival("ingest", db, "--db", tmp_path / "other.duckdb").error(f"{db}: is a DuckDB database", SUPPORTED)


def varied(n: int) -> bytes:
    """Lines that compress like real traces (no long repeats): a cut lands mid-file."""
    rng = random.Random(1)
    return "".join(json.dumps({**BASE, "problem_id": str(i), "reasoning": rng.randbytes(300).hex()}) + "\n"
                   for i in range(n)).encode()


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_truncated_stream_is_an_error_naming_the_line_reached(tmp_path: Path, kind: str) -> None:
    data = varied(2000)  # zstd decodes whole 128 KiB blocks: several of them, so the cut is past the first
    whole = gzip.compress(data) if kind == "gzip" else zstd(data)
    cut = whole[: len(whole) * 2 // 3]  # deliberately truncated: a copy that stopped
    decoder = zlib.decompressobj(wbits=31) if kind == "gzip" else zstandard.ZstdDecompressor().decompressobj()
    reached = decoder.decompress(cut).count(b"\n")  # the lines a decoder recovers from the cut bytes
    assert 0 < reached < 2000
    f = tmp_path / f"cut.jsonl.{'gz' if kind == 'gzip' else 'zst'}"
    f.write_bytes(cut)
    db = tmp_path / "s.duckdb"
    for extra in ((), ("--skip-bad",)):
        legival("ingest", f, "--db", db, *extra).error(
            f"error: {f}: the {kind} stream ends early, after line {reached} (a truncated file?",
            "nothing from this file was stored")
    f.write_bytes(whole[:12])  # cut inside the first line
    legival("ingest", f, "--db", db).error(f"{f}: the {kind} stream ends early, before the end of line 1")
    assert not db.exists()  # the refused ingest created the store and stored nothing: it is not left behind


def test_a_corrupt_gzip_stream_is_an_error_naming_the_line_reached(tmp_path: Path) -> None:
    data = gzip.compress(varied(500))
    f = tmp_path / "bad.jsonl.gz"
    f.write_bytes(data[: len(data) // 2] + bytes(b ^ 0xFF for b in data[len(data) // 2:]))  # flipped bits
    line = legival("ingest", f, "--db", tmp_path / "s.duckdb").error(f"{f}: the gzip stream is corrupt, after line ")
    assert re.search(r"after line \d+ \(", line), line


EMPTY: dict[str, tuple[bytes, str]] = {
    "empty.jsonl": (b"", "the file is empty or holds only blank lines"),
    "blank.jsonl": (b"\n  \n\t\r\n\n", "the file is empty or holds only blank lines"),
    "empty.jsonl.gz": (gzip.compress(b""), "the file is empty or holds only blank lines"),
    "blank.jsonl.zst": (zstd(b"\n\n"), "the file is empty or holds only blank lines"),
    "empty.jsonl.zst": (zstd(b""), "the file is empty or holds only blank lines"),
    "no-rows.parquet": (parquet([]), "a Parquet file with 0 rows"),
    "zero-bytes.parquet": (b"", "the file is empty or holds only blank lines"),
}


@pytest.mark.parametrize("name", list(EMPTY))
def test_a_file_with_no_records_is_a_warning_and_zero_traces(tmp_path: Path, name: str) -> None:
    content, why = EMPTY[name]
    f = tmp_path / name
    f.write_bytes(content)
    good = tmp_path / "good.jsonl"
    good.write_bytes(PLAIN)
    p = legival("ingest", good, f, "--db", tmp_path / "s.duckdb")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    warnings = [ln for ln in p.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings == [f"warning: {f}: no records ({why})"], p.stderr
    s = p.summary()
    assert s["new_traces"] == N
    entry = s["files"][1]
    assert (entry["file"], entry["lines"], entry["new_traces"]) == (str(f), 0, 0)
    assert entry["warnings"] == [f"{f}: no records ({why})"] and s["files"][0]["warnings"] == []


def run_alone(*args: str | Path) -> Ran:
    p = legival(*args)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def test_generate_reads_a_compressed_problems_file_and_names_an_archive(tmp_path: Path) -> None:
    """`legival generate --problems` goes through the same opener (the dataset loaders' `read_jsonl`)."""
    problems = tmp_path / "test.jsonl.gz"
    problems.write_bytes(gzip.compress((FIXTURES / "datasets" / "gsm8k" / "test.jsonl").read_bytes()))
    cfg = tmp_path / "demo.yaml"
    cfg.write_text("name: demo\nmodel: scripted-demo\ndecoding: {max_new_tokens: 7}\n", encoding="utf-8")
    args = ("generate", "--db", tmp_path / "g.duckdb", "--teacher", "demo", "--dataset", "gsm8k",
            "--limit", "2", "--backend", "scripted-demo", "--config", cfg, "--problems")
    p = run_alone(*args, problems)
    assert p.returncode == 0 and p.summary()["generated"] == 2, p.stderr
    archive = tmp_path / "test.zip"
    archive.write_bytes(zipped((FIXTURES / "datasets" / "gsm8k" / "test.jsonl").read_bytes()))
    legival(*args, archive).error(f"{archive}: is a zip archive, which is not read here",
                                  "this command reads JSONL, plain or compressed with gzip or zstd)")


# ------------------------------------------------------------------ issue 45: bombs and special files

GIB = 1 << 30
LIMIT = "over the limit of one record (ingest.max_record_bytes, --max-record-bytes)"


def one_long_line(kind: str, size: int = GIB) -> bytes:
    """A gzip or zstd stream of one JSONL line of `size` bytes (a record whose reasoning is `size` 'a's),
    made in a fraction of a second: 1 GiB is about 1 MB compressed (one compressed MiB repeated)."""
    head = json.dumps({**BASE, "problem_id": "0", "reasoning": ""})[:-2].encode()  # ..."reasoning": "
    mib, whole = b"a" * (1 << 20), size // (1 << 20)
    tail = b'"}\n'
    if kind == "zstd":
        z = zstandard.ZstdCompressor().compressobj()
        return b"".join([z.compress(head), *(z.compress(mib) for _ in range(whole)), z.compress(tail), z.flush()])
    crc = zlib.crc32(head)
    for _ in range(whole):
        crc = zlib.crc32(mib, crc)
    crc = zlib.crc32(tail, crc)
    d = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = d.compress(head) + d.flush(zlib.Z_FULL_FLUSH)
    block = d.compress(mib) + d.flush(zlib.Z_FULL_FLUSH)  # after a full flush: the same bytes for every MiB
    total = len(head) + whole * len(mib) + len(tail)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first + block * whole + d.compress(tail) + d.flush()
            + struct.pack("<II", crc, total & 0xFFFFFFFF))


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_compressed_line_that_inflates_to_1_gib_ends_in_seconds(tmp_path: Path, kind: str) -> None:
    """Issue 45 item 3, our own inputs: a ~1 MB file whose first line inflates to 1 GiB is refused when
    the line passes the limit (64 MiB held at most, never the GiB), naming the line and the option."""
    f = tmp_path / f"bomb.jsonl.{'gz' if kind == 'gzip' else 'zst'}"
    f.write_bytes((zstd(PLAIN) if kind == "zstd" else gzip.compress(PLAIN)) + one_long_line(kind))
    assert f.stat().st_size < 2_000_000
    t0 = time.perf_counter()
    legival("ingest", f, "--db", tmp_path / "s.duckdb", "--skip-bad").error(
        f"{f}: line {N + 1} holds more than 67,108,864 bytes once decompressed, {LIMIT}", "nothing after it was read",
        "nothing from this file was stored")
    assert time.perf_counter() - t0 < 30


def test_a_long_line_is_read_up_to_the_limit_the_option_sets(tmp_path: Path) -> None:
    """The limit is of one line, decompressed or not: a 300 KB record is read by default (and skipped as too
    large a trace by --max-trace-bytes, as before), refused under --max-record-bytes 200000; a plain file
    with no line break (a `head -c` of /dev/urandom as text) is the same line."""
    f = tmp_path / "long.jsonl"
    f.write_bytes(PLAIN + json.dumps({**BASE, "problem_id": "long", "reasoning": "x" * 300_000}).encode() + b"\n")
    p = legival("ingest", f, "--db", tmp_path / "a.duckdb", "--max-trace-bytes", "100000")
    assert (p.returncode, p.summary()["new_traces"], p.summary()["too_large"]) == (0, N, 1), p.stderr
    legival("ingest", f, "--db", tmp_path / "b.duckdb", "--max-record-bytes", "200000").error(
        f"{f}: line {N + 1} holds more than 200,000 bytes, {LIMIT}")
    p = legival("ingest", f, "--db", tmp_path / "c.duckdb", "--max-record-bytes", "400000")
    assert p.returncode == 0 and p.summary()["new_traces"] == N + 1, p.stderr
    exact = tmp_path / "exact.jsonl"  # a line of exactly the limit is within it, newline or not
    exact.write_bytes(PLAIN[:-1])
    longest = max(len(x) for x in PLAIN.split(b"\n"))
    p = legival("ingest", exact, "--db", tmp_path / "d.duckdb", "--max-record-bytes", str(longest))
    assert p.returncode == 0 and p.summary()["new_traces"] == N, p.stderr


def test_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    """A character device that never ends: told by its first bytes (binary data), never read on."""
    legival("ingest", "/dev/zero", "--db", tmp_path / "s.duckdb").error("/dev/zero: is binary data, which is not read")
    legival("ingest", "/dev/zero", "--db", tmp_path / "s.duckdb", "--from", "openai", "--dataset", "gsm8k",
            "--problems", FIXTURES / "datasets" / "gsm8k" / "test.jsonl").error("/dev/zero: is binary data")


def test_a_socket_is_named_as_one(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "traces.jsonl"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        legival("ingest", path, "--db", tmp_path / "s.duckdb").error(f"{path}: is a socket, not a file")


def test_a_named_pipe_whose_writer_writes_nothing_is_an_empty_input(tmp_path: Path) -> None:
    fifo = tmp_path / "traces.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    p = legival("ingest", fifo, "--db", tmp_path / "s.duckdb")
    writer.join(30)
    assert p.returncode == 0 and p.summary()["new_traces"] == 0, p.stderr
    assert f"warning: {fifo}: no records (the file is empty" in p.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_named_pipe_with_no_writer_says_so_and_a_signal_ends_the_wait(tmp_path: Path, signum: int) -> None:
    """Issue 45 item 7: standard error says the input is a named pipe nothing writes to, and Ctrl-C or
    SIGTERM ends the wait at once, exit 128 + the signal, one error line (the real entry point: signals)."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "legival", "ingest", str(fifo), "--db", str(tmp_path / "s.duckdb")],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        first = p.stderr.readline()  # waits for the notice, however long the start takes
        assert first == f"{fifo}: a named pipe (FIFO) that nothing has written to yet: waiting for a writer " \
                        "(Ctrl-C stops)\n", first
        p.send_signal(signum)
        rest = p.communicate(timeout=30)[1]
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 128 + signum, (p.returncode, rest)
    errors = [ln for ln in rest.splitlines() if ln.startswith("error: ")]
    assert "Traceback" not in rest and len(errors) == 1 and errors[0].startswith("error: interrupted"), rest


@pytest.mark.parametrize("select", [None, "t1"])
def test_a_spec_teacher_reads_under_its_ingest_sections_limit(tmp_path: Path, select: str | None) -> None:
    """`ingest: {max_record_bytes: N}` holds a spec teacher's lines to N, its `select:` copy included."""
    from legival_core.run_config import Ingest
    from legival_core.stages.ingest import IngestError, ingest_spec_file

    f = tmp_path / "long.jsonl.gz"
    f.write_bytes(gzip.compress(PLAIN + json.dumps({**BASE, "problem_id": "long", "reasoning": "x" * 300_000}).encode()))
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(IngestError, match=f"line {N + 1} holds more than 200,000 bytes once decompressed"):
            ingest_spec_file(store, f, "t1", select, Ingest(max_record_bytes=200_000))
        assert ingest_spec_file(store, f, "t1", select, Ingest(max_record_bytes=400_000)).new_traces == N + 1
