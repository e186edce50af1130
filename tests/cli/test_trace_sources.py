"""The trace-source front door (legival_core/readers/sources): `legival ingest --from`, its options, the
spec's `format:` and `legival list formats`, on Legi-Val's own format. Each source of another tool has
its own tests (tests/cli/test_source_*.py), made with that tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from legival_core.store import Store
from tests._cli import legival
from tests._sql import rows
from tests.conftest import EXAMPLES

SAMPLE = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    f = tmp_path / "t.jsonl"
    f.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:3]), encoding="utf-8")
    return f


def _stored(db: Path) -> list[tuple[object, ...]]:
    with Store(db, read_only=True) as s:
        return rows(s, "SELECT teacher, dataset, problem_id, reasoning FROM traces ORDER BY 1, 3")


def test_own_format_by_name_and_by_auto_store_the_same(tmp_path: Path, traces: Path) -> None:
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    ra = legival("ingest", str(traces), "--db", str(a))
    rb = legival("ingest", str(traces), "--db", str(b), "--from", "legival")
    assert ra.returncode == rb.returncode == 0, ra.stderr + rb.stderr
    assert ra.summary()["files"][0]["format"] == rb.summary()["files"][0]["format"] == "legival"
    assert "read as" not in ra.stderr  # auto says what it chose only when it is not our own format
    assert _stored(a) == _stored(b) and len(_stored(a)) == 3


@pytest.mark.parametrize(("args", "expect"), [
    (("--from", "inspektor"), "unknown format 'inspektor' (--from): the formats are auto"),
    (("--map", "reasoning"), "--map: 'reasoning' is not FIELD=COLUMN"),
    (("--map", "thoughts=x"), "--map: 'thoughts' is not a trace field"),
    (("--map", "reasoning=a,reasoning=b"), "--map: 'reasoning' is mapped twice"),
    (("--requests", "r.jsonl"), "which takes no --requests"),
    (("--dataset", "gsm8k"), "which takes no --dataset"),
])
def test_bad_source_options_are_one_line(tmp_path: Path, traces: Path, args: tuple[str, ...], expect: str) -> None:
    (tmp_path / "r.jsonl").write_text("{}\n")
    r = legival("ingest", str(traces), "--db", str(tmp_path / "s.duckdb"), *args, cwd=tmp_path)
    r.error(expect)
    assert not (tmp_path / "s.duckdb").exists() or not _stored(tmp_path / "s.duckdb")


def test_list_formats_names_each_source_and_its_install() -> None:
    r = legival("list", "formats")
    assert r.returncode == 0, r.stderr
    assert "legival" in r.summary()["formats"]
    assert "the base install" in r.stdout


def test_a_spec_teacher_takes_format_and_the_source_options(tmp_path: Path, traces: Path) -> None:
    base = {"store": "s.duckdb", "datasets": ["gsm8k"], "report": {"out": "report"}}
    ok = {**base, "teachers": [{"name": "t", "traces": [str(traces)], "format": "legival"}]}
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(ok))
    assert legival("plan", str(tmp_path / "ok.yaml")).returncode == 0
    for teacher, field in [
        ({"name": "t", "traces": [str(traces)], "format": "nope"}, "teachers.0.format"),
        ({"name": "t", "traces": [str(traces)], "dataset": "nope"}, "teachers.0.dataset"),
        ({"name": "t", "traces": [str(traces)], "map": {"thoughts": "x"}}, "teachers.0.map"),
        ({"name": "t", "traces": [str(traces)], "requests": "missing.jsonl"}, "teachers.0.requests"),
        ({"name": "t", "generate": {"backend": "scripted-demo", "model": "m"}, "format": "legival"}, "teachers.0"),
    ]:
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**base, "teachers": [teacher]}))
        r = legival("plan", str(tmp_path / "bad.yaml"))
        r.error("bad.yaml")
        assert f"  {field}" in r.stderr, (field, r.stderr)


def test_add_teacher_writes_the_source_keys(tmp_path: Path, traces: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"store": "s.duckdb", "datasets": ["gsm8k"], "report": {"out": "r"},
                                    "teachers": [{"name": "a", "traces": [str(traces)]}]}))
    r = legival("add-teacher", "b", "--traces", str(traces), "--from", "legival", "--spec", str(spec),
                "--prefect-file", str(tmp_path / "prefect.yaml"))
    assert r.returncode == 0, r.stderr
    (b,) = [t for t in yaml.safe_load(spec.read_text())["teachers"] if t["name"] == "b"]
    assert b["format"] == "legival"
    bad = legival("add-teacher", "c", "--model", "m", "--from", "inspect", "--spec", str(spec),
                  "--prefect-file", str(tmp_path / "prefect.yaml"))
    bad.error("need --traces")
    assert json.loads(json.dumps(yaml.safe_load(spec.read_text())))["teachers"][-1]["name"] == "b"


@pytest.mark.parametrize(("kind", "name", "args", "expect"), [
    ("fifo", "run.eval", ("--from", "inspect"), "is a named pipe (FIFO), not a regular file: an Inspect log is read "
                                                "by seeking in it and more than once"),
    ("fifo", "t.parquet", (), "is a named pipe (FIFO), not a regular file: Parquet is read by seeking in it"),
    ("fifo", "t.parquet", ("--from", "hf", "--dataset", "gsm8k", "--teacher", "t"),
     "is a named pipe (FIFO), not a regular file: datasets reads a data file by its path"),
    ("device", "/dev/zero", ("--from", "inspect"), "is a character device, not a regular file: an Inspect log is "
                                                   "read by seeking in it"),
    ("dir", "logs", ("--from", "inspect"), "is a directory (give the .eval or .json log files in it)"),
    ("dir", "batch", ("--from", "openai", "--dataset", "gsm8k", "--problems", "P"),
     "is a directory, not a file (give the JSONL files in it)"),
    ("dir", "samples_gsm8k_2026-01-01T00-00-00.jsonl", ("--from", "lm-eval"),
     "is a directory, not a file (give the JSONL files in it)"),
])
def test_what_is_not_a_regular_file_is_named_by_the_sources_that_need_one(
        tmp_path: Path, kind: str, name: str, args: tuple[str, ...], expect: str) -> None:
    """Issue 45 item 7: a source that seeks in its input or reads it twice, given a named pipe (none of
    them opens it: nothing writes to these), a device or a directory, says what the path is and why it
    cannot be read, exit 2."""
    import os

    path = Path(name) if kind == "device" else tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    problems = str(EXAMPLES.parent / "tests" / "fixtures" / "datasets" / "gsm8k" / "test.jsonl")
    r = legival("ingest", str(path), "--db", str(tmp_path / "s.duckdb"), *(problems if a == "P" else a for a in args))
    r.error(f"{path}: {expect}", "nothing from this file was stored")


def test_every_registered_source_is_a_trace_source() -> None:
    """Every reader the registry holds for a format has the `TraceSource` shape (`read(path, options)`,
    positionally, as `read_source` calls it) and a `SourceInfo`; a reader of another shape fails the check."""
    import inspect

    from legival_core.readers.sources import (
        OWN,
        SourceInfo,
        SourceOptions,
        source_info,
        source_names,
        source_reader,
    )

    names = source_names()
    assert len(names) >= 5 and names[-1] == OWN
    for name in names:
        inspect.signature(source_reader(name)).bind(Path("t.jsonl"), SourceOptions())
        assert isinstance(source_info(name), SourceInfo), name

    def one_argument(path: Path) -> None:
        return None

    with pytest.raises(TypeError):
        inspect.signature(one_argument).bind(Path("t.jsonl"), SourceOptions())
