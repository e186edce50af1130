"""Store schema versions through the real `legival` commands (legival_core/store/migrations.py): a store
written by a newer Legi-Val is refused by every command that opens one, byte for byte unchanged; an
older one is migrated in one transaction by a writable open (`legival migrate`, or any command that
writes) and refused, unchanged, by a read-only one, with the command that migrates it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from legival_core.store import SCHEMA_VERSION, migrations
from tests._cli import Ran, legival
from tests.conftest import REPO

RECORD = {"model": "t1", "dataset": "gsm8k", "problem_id": "gsm8k-test-7",
          "problem": "Tom has 9 apples and buys 9 more. How many apples does he have?",
          "gold_answer": "18", "reasoning": "9 + 9 = 18.", "response": "\\boxed{18}"}
NOT_IN_VERSION_0 = ("runs", "run_metrics", "sentence_embeddings")
"""Tables a version-1 store has that the version-0 store built here lacks."""


def assert_error(p: Ran, *fragments: str) -> str:
    return p.error(*fragments)


def file_state(db: Path) -> tuple[str, list[str]]:
    """The file's bytes and its sibling files (a WAL left behind would be a change too)."""
    return (hashlib.sha256(db.read_bytes()).hexdigest(),
            sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)))


def tables(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()


def version_row(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "a.jsonl"
    path.write_text(json.dumps(RECORD) + "\n")
    return path


@pytest.fixture(scope="module")
def current_store(tmp_path_factory: pytest.TempPathFactory, trace_file: Path) -> Path:
    """A store of this Legi-Val's schema holding one graded trace (copied per test)."""
    db = tmp_path_factory.mktemp("current") / "s.duckdb"
    ran = legival("ingest", trace_file, "--db", db)
    assert ran.returncode == 0, ran.stderr
    assert version_row(db) == [(SCHEMA_VERSION,)]
    return db


def copy_of(store: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(store, folder / "s.duckdb"))


def rewrite(db: Path, *statements: str) -> None:
    """Edit the file with DuckDB directly (what another Legi-Val would have written), then checkpoint it
    so that the file alone holds the store."""
    con = duckdb.connect(str(db))
    try:
        for sql in statements:
            con.execute(sql)
        con.execute("CHECKPOINT")
    finally:
        con.close()


@pytest.fixture
def newer(current_store: Path, tmp_path: Path) -> Path:
    db = copy_of(current_store, tmp_path / "newer")
    rewrite(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    return db


@pytest.fixture
def older(current_store: Path, tmp_path: Path) -> Path:
    """A version-0 store: meta says 0, and the tables added after the first version are missing."""
    db = copy_of(current_store, tmp_path / "older")
    rewrite(db, "UPDATE meta SET value = '0' WHERE key = 'schema_version'",
            *(f"DROP TABLE {t}" for t in NOT_IN_VERSION_0))
    assert not tables(db) & set(NOT_IN_VERSION_0)
    return db


def _commands(db: Path, tmp: Path, trace_file: Path) -> dict[str, list[str | Path]]:
    spec = REPO / "examples" / "demo.yaml"
    return {
        "ingest": ["ingest", trace_file, "--db", db],
        "report": ["report", "--db", db, "--out", tmp / "rep"],
        "efficiency": ["efficiency", "--db", db],
        "grade": ["grade", "--db", db],
        "serve": ["serve", "--db", db, "--port", "0"],
        "runs": ["runs", "--db", db],
        "diff": ["diff", "--db", db],
        "plan": ["plan", spec, "--db", db],
        "run": ["run", spec, "--db", db, "--out", tmp / "run-rep"],
        "migrate": ["migrate", "--db", db],
        "quality": ["quality", "--db", db],
        "judge": ["judge", "--db", db, "--judge", "lexical"],
    }


COMMANDS = ["ingest", "report", "efficiency", "grade", "serve", "runs", "diff", "plan", "run", "migrate", "quality",
            "judge"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_store_of_a_newer_schema_is_refused_by_every_command_and_left_unchanged(
        newer: Path, tmp_path: Path, trace_file: Path, command: str) -> None:
    before = file_state(newer)
    ran = legival(*_commands(newer, tmp_path, trace_file)[command])
    line = assert_error(ran, str(newer), "DB was written by a newer Legi-Val (schema 99); upgrade")
    assert f"schema {SCHEMA_VERSION}" in line
    assert file_state(newer) == before


def test_an_older_store_is_refused_read_only_and_migrated_in_one_transaction(
        older: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only commands refuse it with the command that migrates it; a migration that fails half-way
    (after the real step ran) leaves the file byte for byte as it was; `legival migrate` then brings
    it to the current schema, with every stored row kept."""
    before = file_state(older)
    read_only: list[list[str | Path]] = [["report", "--db", older, "--out", older.parent / "rep"], ["runs", "--db", older]]
    for command in read_only:
        assert_error(legival(*command), str(older), "older Legi-Val (schema 0", f"legival migrate --db {older}")
        assert file_state(older) == before
    assert not (older.parent / "rep").exists()

    real_step = migrations.MIGRATIONS[0]

    def half_way(con: duckdb.DuckDBPyConnection) -> None:
        real_step(con)  # the real step: the missing tables are created...
        raise RuntimeError("disk on fire")  # ...and then the step fails

    monkeypatch.setattr(migrations, "MIGRATIONS", [half_way])
    assert_error(legival("migrate", "--db", older), str(older), "schema 0 -> 1", "disk on fire", "unchanged")
    assert file_state(older) == before
    monkeypatch.undo()

    con = duckdb.connect(str(older), read_only=True)
    traces_before = con.execute("SELECT * FROM traces ORDER BY ALL").fetchall()
    grades_before = con.execute("SELECT * FROM grades ORDER BY ALL").fetchall()
    con.close()
    ran = legival("migrate", "--db", older)
    assert ran.returncode == 0, ran.stderr
    assert ran.summary() == {"command": "migrate", "db": str(older), "from": "0", "to": SCHEMA_VERSION,
                             "migrated": True}
    assert version_row(older) == [(SCHEMA_VERSION,)]
    assert set(NOT_IN_VERSION_0) <= tables(older)
    con = duckdb.connect(str(older), read_only=True)
    assert con.execute("SELECT * FROM traces ORDER BY ALL").fetchall() == traces_before
    assert con.execute("SELECT * FROM grades ORDER BY ALL").fetchall() == grades_before
    con.close()
    ran = legival("runs", "--db", older)  # read-only commands open it now
    assert ran.returncode == 0, ran.stderr
    again = legival("migrate", "--db", older)
    assert again.returncode == 0 and again.summary()["migrated"] is False, again.stderr


def test_a_command_that_writes_migrates_an_older_store_and_says_so(older: Path, trace_file: Path) -> None:
    ran = legival("ingest", trace_file, "--db", older)
    assert ran.returncode == 0, ran.stderr
    assert f"note: {older}: migrated the store from schema 0 to {SCHEMA_VERSION}" in ran.stderr
    assert version_row(older) == [(SCHEMA_VERSION,)] and set(NOT_IN_VERSION_0) <= tables(older)


def test_a_store_without_a_version_row_is_version_0(older: Path) -> None:
    """Tables but no recorded version (an open that stopped between creating the tables and recording
    the version): version 0, migrated like any older store."""
    rewrite(older, "DELETE FROM meta")
    assert_error(legival("runs", "--db", older), "older Legi-Val (schema 0")
    ran = legival("migrate", "--db", older)
    assert ran.returncode == 0 and ran.summary()["from"] == "0", ran.stderr
    assert version_row(older) == [(SCHEMA_VERSION,)]
