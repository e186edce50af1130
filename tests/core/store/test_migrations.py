"""The schema version a store records (legival_core/store/migrations.py), read on every open."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from legival_core.store import SCHEMA_VERSION, Store, StoreUnreadable, migrations


def test_there_is_one_migration_step_per_version() -> None:
    """`MIGRATIONS[k]` takes schema k to k+1: a bump of `SCHEMA_VERSION` without its step fails here."""
    assert len(migrations.MIGRATIONS) == int(SCHEMA_VERSION)


def test_a_new_store_records_the_current_version(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as s:
        assert migrations.stored_version(s.con) == int(SCHEMA_VERSION) and s.migrated_from is None


@pytest.mark.parametrize(("setup", "expected"), [
    ([], None),  # an empty DuckDB file: a new store
    (["CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)"], None),
    (["CREATE TABLE problems (dataset VARCHAR)"], 0),  # tables, no meta
    (["CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)", "CREATE TABLE traces (trace_id VARCHAR)"], 0),
    (["CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)", "INSERT INTO meta VALUES ('schema_version', '7')"], 7),
])
def test_stored_version(tmp_path: Path, setup: list[str], expected: int | None) -> None:
    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    for sql in setup:
        con.execute(sql)
    assert migrations.stored_version(con) == expected
    con.close()


def test_a_version_that_is_not_a_number_is_an_unreadable_store(tmp_path: Path) -> None:
    path = tmp_path / "x.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', 'banana')")
    con.close()
    for read_only in (True, False):
        with pytest.raises(StoreUnreadable, match="'banana', not a version number"):
            Store(path, read_only=read_only)
