"""`legival_core.readers.input_files`: a compressed file is read as a stream (its memory does not grow
with the file), a stream cut short yields its whole lines and then the error, the dataset loaders
and a spec teacher's `select:` read compressed files too. (The command-line behaviour, every
container and the empty files: tests/cli/test_compressed_inputs.py.)"""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard

from legival_core.datasets import get_dataset
from legival_core.readers.input_files import InputFileError, input_stem, read_lines, sniff
from legival_core.readers.records import read_jsonl, read_jsonl_records
from legival_core.readers.trace_records import IngestError
from legival_core.stages.ingest import ingest_spec_file
from legival_core.store import Store
from tests._sql import rows
from tests.conftest import FIXTURES

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"


def write_varied(path: Path, kind: str, n: int, width: int = 1000) -> int:
    """n lines of `width` hex characters (compressing about 2:1, like real text), written as a stream."""
    rng = random.Random(0)
    with (gzip.open(path, "wb", compresslevel=1) if kind == "gzip" else
          zstandard.ZstdCompressor(level=1).stream_writer(path.open("wb"))) as f:
        for _ in range(n):
            f.write(rng.randbytes(width // 2).hex().encode() + b"\n")
    return n


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_compressed_file_is_read_as_a_stream(tmp_path: Path, kind: str) -> None:
    """24 MB of lines read with a few hundred KB held at a time: reading the file whole (or its
    decompressed bytes whole) would hold all of it."""
    f = tmp_path / "big.jsonl"
    n = write_varied(f, kind, 24_000)
    assert sniff(f).compression == kind
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_lines(f))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 2_000_000, f"{peak:,} bytes held while reading a 24 MB file"


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_cut_stream_yields_its_whole_lines_then_the_error(tmp_path: Path, kind: str) -> None:
    f = tmp_path / "t.jsonl"
    write_varied(f, kind, 600)
    whole = f.read_bytes()
    cut = whole[: len(whole) // 2]
    f.write_bytes(cut)
    decoder = zlib.decompressobj(wbits=31) if kind == "gzip" else zstandard.ZstdDecompressor().decompressobj()
    expected = decoder.decompress(cut).split(b"\n")[:-1]  # the whole lines in the cut bytes
    got: list[bytes] = []
    with pytest.raises(InputFileError) as e:
        for i, raw in read_lines(f):
            assert i == len(got) + 1
            got.append(raw)
    assert got == expected and len(got) > 0
    assert str(e.value) == (f"{f}: the {kind} stream ends early, after line {len(got)} (a truncated file? what "
                            "follows could not be read)")


def test_dataset_loaders_read_compressed_problem_files(tmp_path: Path) -> None:
    spec = get_dataset("gsm8k")
    plain = list(spec.load(GSM8K))
    zst = tmp_path / "test.jsonl"  # zstd, named plainly: told by content
    zst.write_bytes(zstandard.ZstdCompressor().compress(GSM8K.read_bytes()))
    assert list(spec.load(zst)) == plain and len(plain) > 1
    gz = tmp_path / "test.jsonl.gz"
    gz.write_bytes(gzip.compress(GSM8K.read_bytes()))
    assert [(p.question, p.gold) for p in spec.load(gz)] == [(p.question, p.gold) for p in plain]
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(json.dumps({"question": "caf\u00e9", "answer": "#### 5"}, ensure_ascii=False).encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.jsonl:1: invalid UTF-8 byte 0xe9 at column"):
        list(read_jsonl(bad))


def test_input_stem_drops_the_compression_suffix() -> None:
    assert [input_stem(Path(n)) for n in ("test.jsonl.gz", "a/test.jsonl.ZST", "test.jsonl", "lsat-lr.json.zstd",
                                          "x.gz")] == ["test", "test", "test", "lsat-lr", "x"]


@pytest.mark.parametrize("dataset, plain, compressed", [
    ("gsm8k", GSM8K, "test.jsonl.gz"),
    ("lsat", FIXTURES / "datasets" / "lsat-lr.jsonl", "lsat-lr.jsonl.zst"),
])
def test_a_compressed_problems_file_gives_the_plain_files_problem_ids(tmp_path: Path, dataset: str, plain: Path,
                                                                      compressed: str) -> None:
    """Problem ids come from the file's stem (`gsm8k-test-0`, `lsat-lr-0`): compressing the file must
    not rename its problems (`gsm8k-test.jsonl-0` would match no stored trace)."""
    f = tmp_path / compressed
    f.write_bytes(gzip.compress(plain.read_bytes()) if compressed.endswith(".gz") else
                  zstandard.ZstdCompressor().compress(plain.read_bytes()))
    expected = list(get_dataset(dataset).load(plain))
    assert list(get_dataset(dataset).load(f)) == expected and len(expected) > 1
    assert expected[0].problem_id == {"gsm8k": "gsm8k-test-0", "lsat": "lsat-lr-0"}[dataset]


def test_the_gpqa_csv_loader_reads_a_compressed_file_and_names_an_archive(tmp_path: Path) -> None:
    """A CSV with quoted cells over several lines, gzip- or zstd-compressed, loads as the plain file; a
    zip of it is refused saying that the loader reads CSV (not JSONL)."""
    import zipfile

    plain = FIXTURES / "datasets" / "gpqa.csv"
    expected = list(get_dataset("gpqa").load(plain))
    assert len(expected) == 3 and "\n" in expected[0].question
    gz, zst = tmp_path / "gpqa.csv.gz", tmp_path / "gpqa.csv"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    zst.write_bytes(zstandard.ZstdCompressor().compress(b"\xef\xbb\xbf" + plain.read_bytes()))  # a BOM too
    assert list(get_dataset("gpqa").load(gz)) == expected
    assert list(get_dataset("gpqa").load(zst)) == expected
    archive = tmp_path / "gpqa.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(plain, "gpqa.csv")
    with pytest.raises(InputFileError) as e:
        list(get_dataset("gpqa").load(archive))
    assert str(e.value) == (f"{archive}: is a zip archive, which is not read here (extract it and give the files in "
                            "it; the gpqa loader reads CSV, plain or compressed with gzip or zstd)")
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(plain.read_bytes() + "q,Qu\u00e9?,1,2,3,4,recTEST0004,Chemistry\r\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.csv:7: invalid UTF-8 byte 0xe9 at column 5$"):
        list(get_dataset("gpqa").load(latin1))


def test_a_reader_of_jsonl_only_names_a_parquet_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": "#### 1"}]), f)
    with pytest.raises(InputFileError) as e:
        list(read_jsonl_records(f))
    assert str(e.value) == (f"{f}: is a Parquet file, which is not read here (write its rows as JSONL; this command "
                            "reads JSONL, plain or compressed with gzip or zstd)")
    assert sniff(f, parquet=True).kind == "parquet"


def test_a_spec_teachers_select_reads_a_compressed_file(store: Store, tmp_path: Path) -> None:
    """`select:` copies one model's records out of a compressed multi-model file, at their original
    line numbers; a cut stream is an error naming the spec's file, not the temporary copy."""
    base = {"dataset": "gsm8k", "problem": "What is 1+1?", "gold_answer": "2", "reasoning": "1+1=2",
            "response": "The answer is 2."}
    lines = [{**base, "model": m, "problem_id": str(i)} for i, m in enumerate(["a", "b", "a", "b", "b"])]
    f = tmp_path / "mixed.jsonl.zst"
    f.write_bytes(zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in lines).encode()))
    s = ingest_spec_file(store, f, "teacher-b", "b")
    assert (s.file, s.new_traces) == (str(f), 3)
    assert sorted(line for (line,) in rows(store, "SELECT source_line FROM traces")) == [2, 4, 5]
    f.write_bytes(f.read_bytes()[:-6])  # deliberately truncated
    with pytest.raises(IngestError) as e:
        ingest_spec_file(store, f, "teacher-b", "b")
    assert str(e.value).startswith(f"{f}: the zstd stream ends early, ")
