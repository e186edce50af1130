"""Store schema versions: the version a store file records, and the migrations that bring an older one
up to this code's `SCHEMA_VERSION`.

Every store records `meta.schema_version`, in the same open that created the tables. Legi-Val wrote "1"
from its first commit (cacfffb) and writes "2" since issue 46 (`_to_2`: the decode steps' column and
the step-events stage renamed). The tables added under "1" (`sentence_embeddings`, `runs`,
`run_metrics`, ...) came without a bump because `CREATE TABLE IF NOT EXISTS` adds them to an older store on
its next writable open (`Store`), and no column changed. A file with tables but no version row (an open
that stopped between creating the tables and recording the version, or a file not written by
Legi-Val) is version 0: its tables are some of version 1's, and the migration to 1 creates the rest.
A file with no table at all is a new store (no version yet).

`MIGRATIONS[k]` takes a store of schema k to k+1. `Store` runs every step from the stored version to
`SCHEMA_VERSION`, then records the new version, in ONE transaction: a step that fails leaves the file as
it was. A read-only open never migrates: it refuses an older store with the command that does
(`legival migrate --db PATH`). A store newer than the code is refused by every open.

When a table changes shape: bump `SCHEMA_VERSION` (schema.py) and append the step from the previous
version here (ALTER TABLE ..., a backfill); a step may only use SQL valid at its own version, so the
step to 1 keeps its own copy of version 1's tables once `DDL` moves on (copy `DDL`'s text into it then).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from legival_core.store.schema_v1 import DDL_V1

if TYPE_CHECKING:
    import duckdb

Migration = Callable[["duckdb.DuckDBPyConnection"], None]


def _to_1(con: duckdb.DuckDBPyConnection) -> None:
    """0 -> 1: the tables of version 1 that the store lacks (`schema_v1.DDL_V1`)."""
    con.execute(DDL_V1).fetchall()


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_catalog = current_database() AND table_name = ?", [table]).fetchall()}


def _to_2(con: duckdb.DuckDBPyConnection) -> None:
    """1 -> 2 (one meaning per name, issue 46): "steps" meant three things. The segmentation's `steps`
    table keeps its name; the engines' forward passes in `transfer_timings` become `decode_steps`; the
    stage that writes `step_events` is `step_events` (it was `steps`) in the failure tables."""
    if "steps" in _columns(con, "transfer_timings"):
        con.execute("ALTER TABLE transfer_timings RENAME COLUMN steps TO decode_steps").fetchall()
    for table in ("unit_failures", "stage_failures"):
        if "stage" in _columns(con, table):
            con.execute(f"UPDATE {table} SET stage = 'step_events' WHERE stage = 'steps'").fetchall()


MIGRATIONS: list[Migration] = [_to_1, _to_2]
"""`MIGRATIONS[k]`: schema k -> k+1, run inside the opening transaction (no COMMIT of its own)."""


class UnknownVersion(ValueError):
    """`meta.schema_version` holds something that is not a version number."""


def stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The schema version the store records: None for a file with no table (a new store), 0 for tables
    without a version row."""
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_catalog = current_database()").fetchall()}
    if "meta" in tables:
        found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()  # drained: DuckDB
        if found:  # refuses new work on a connection while a result is pending
            text = str(found[0][0]).strip()
            if not text.isdigit():
                raise UnknownVersion(f"meta.schema_version is {found[0][0]!r}, not a version number")
            return int(text)
    return 0 if tables - {"meta"} else None


def migrate(con: duckdb.DuckDBPyConnection, version: int, target: int) -> None:
    """Run `MIGRATIONS[version:target]` and record `target`, all in the caller's transaction; an error
    names the step that failed (`MigrationFailed.step`)."""
    step = version
    try:
        for step in range(version, target):
            MIGRATIONS[step](con)
        con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)").fetchall()
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(target)]).fetchall()
    except Exception as e:
        raise MigrationFailed(step, e) from e


class MigrationFailed(Exception):
    def __init__(self, step: int, cause: Exception) -> None:
        super().__init__(f"schema {step} -> {step + 1}: {type(cause).__name__}: {cause}")
        self.step = step
