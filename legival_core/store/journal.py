"""The journal: where long-running servers write, so that they never hold the store
(docs/architecture.md, "The journal").

DuckDB allows one process per file. A study server runs for days (the reward server too): were it to
keep the store open, every `report`, `serve`, `study grade` and run on that store would be refused for
as long. So a server reads what it needs from the store when it starts, closes it, and commits each
row it acknowledges into the journal beside the store, `<db>.journal/journal.sqlite3`:

- **SQLite in WAL mode**, `synchronous=FULL`: in the standard library, many processes may append and
  read at once (readers never block the writer), and a commit is on disk before `append` returns, so
  a `kill -9` loses nothing that was acknowledged. Append-only files would need our own atomic commit,
  locking between processes and compaction; SQLite is exactly that, tested for decades.
- A record is (seq, table, row): the row as JSON, for one of the `JOURNALED` store tables.
- **A writable open of the store absorbs the journal** (`absorb`, called by `Store`): every record
  inserted into its table in one store transaction, `INSERT OR IGNORE` on the table's primary key (a row
  absorbed twice is stored once), then those records are deleted from the journal. A crash between
  the two leaves them in the journal; the next open absorbs them again and stores nothing twice.
- **A read-only open overlays it** (`overlay`): each journaled table is shadowed, for that connection
  only, by a temporary view of its stored rows plus the journaled rows whose key is not stored, so
  `report`, `serve`, `runs` and `study list` see every committed row and write nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

__all__ = ["JOURNALED", "Journal", "absorb", "journal_path", "overlay"]

JOURNALED = frozenset({"study_answers", "study_events", "reward_log"})
"""The store tables a server writes through the journal (each has a primary key: the dedup of absorb)."""

FILE = "journal.sqlite3"
BUSY_TIMEOUT_S = 60.0
"""How long one journal transaction waits for another process's (each holds it for milliseconds)."""
ABSORB_CHUNK = 50_000
"""Records read from the journal at a time while absorbing (one store transaction for all)."""


def journal_path(db: str | Path) -> Path:
    """`<db>.journal/journal.sqlite3` (the folder is one of the store's files: `legival_core.outputs`)."""
    from legival_core.outputs import sidecar

    return sidecar(db, "journal") / FILE


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} cannot be journaled")


class Journal:
    """One process's handle on a store's journal; thread-safe (one connection under a lock)."""

    def __init__(self, db: str | Path) -> None:
        self.path = journal_path(db)
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        self._lock = threading.Lock()
        self._con = _connect(self.path)

    def append(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Commit `rows` of `table` durably (on disk when this returns), all or none."""
        if table not in JOURNALED:
            raise ValueError(f"{table} is not a journaled table ({', '.join(sorted(JOURNALED))})")
        payload = [(table, json.dumps(dict(r), default=_jsonable, ensure_ascii=False)) for r in rows]
        with self._lock, self._con:
            self._con.executemany("INSERT INTO records (tbl, row) VALUES (?, ?)", payload)

    def pending(self) -> int:
        """Records not yet absorbed into the store."""
        with self._lock:
            return int(self._con.execute("SELECT count(*) FROM records").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, "
                "row TEXT NOT NULL)")
    con.isolation_level = "DEFERRED"  # `with con:` is then one transaction
    return con


def _records(path: Path, after: int, limit: int) -> list[tuple[int, str, str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return con.execute("SELECT seq, tbl, row FROM records WHERE seq > ? ORDER BY seq LIMIT ?",
                           (after, limit)).fetchall()
    finally:
        con.close()


def _columns(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, type) of every column of the stored table, and its primary key's columns."""
    cols = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = ? "
                       "AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
                       [catalog, table]).fetchall()
    keys = con.execute("SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = ? "
                       "AND schema_name = 'main' AND table_name = ? AND constraint_type = 'PRIMARY KEY'",
                       [catalog, table]).fetchall()
    return [(str(n), str(t)) for n, t in cols], list(keys[0][0]) if keys else []


def _select(columns: list[tuple[str, str]]) -> str:
    """The columns of a journaled row (`row`, JSON text) cast to the stored table's types."""
    parts = []
    for name, typ in columns:
        quoted = name.replace('"', '""')
        parts.append(f"""CAST(json_extract_string(row, '$."{quoted}"') AS {typ}) AS "{quoted}\"""")
    return ", ".join(parts)


def _catalog(con: duckdb.DuckDBPyConnection) -> str:
    return str(con.execute("SELECT current_database()").fetchall()[0][0])


def _load(con: duckdb.DuckDBPyConnection, path: Path, into: str, catalog: str) -> int:
    """Every journal record into `into`_<table> temporary tables (typed as the stored tables); the last seq."""
    import polars as pl

    last = 0
    made: set[str] = set()
    while True:
        batch = _records(path, last, ABSORB_CHUNK)
        if not batch:
            return last
        last = batch[-1][0]
        for table in sorted({t for _s, t, _r in batch if t in JOURNALED}):
            rows = pl.DataFrame({"row": [r for _s, t, r in batch if t == table]}, schema={"row": pl.Utf8})
            columns, _keys = _columns(con, catalog, table)
            if not columns:  # an older store without the table: a writable open creates it, then absorbs
                continue
            con.register("journal_batch", rows)
            try:
                verb = "INSERT INTO" if table in made else "CREATE TEMP TABLE"
                suffix = "" if table in made else " AS"
                con.execute(f'{verb} "{into}_{table}"{suffix} SELECT {_select(columns)} FROM journal_batch')
            finally:
                con.unregister("journal_batch")
            made.add(table)


def absorb(con: duckdb.DuckDBPyConnection, db: str | Path) -> int:
    """Take the journal into the store (a writable connection, no transaction open): one transaction,
    a row already stored (its key) is left as stored; then the absorbed records leave the journal.
    Returns the rows newly stored."""
    path = journal_path(db)
    if not path.exists():
        return 0
    catalog = _catalog(con)
    stored = 0
    con.execute("BEGIN TRANSACTION")
    try:
        last = _load(con, path, "absorbing", catalog)
        for table in sorted(JOURNALED):
            if not _exists(con, f"absorbing_{table}"):
                continue
            columns, _keys = _columns(con, catalog, table)
            names = ", ".join(f'"{n}"' for n, _t in columns)
            before = int(con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0])
            con.execute(f'INSERT OR IGNORE INTO "{table}" ({names}) SELECT {names} FROM "absorbing_{table}"')
            stored += int(con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]) - before
            con.execute(f'DROP TABLE "absorbing_{table}"')
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    if last:
        _forget(path, last)
    return stored


def _exists(con: duckdb.DuckDBPyConnection, temp_table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'temp' AND table_name = ?",
                            [temp_table]).fetchall()[0][0])


def _forget(path: Path, upto: int) -> None:
    """Delete the absorbed records (seq <= upto); what a server appended meanwhile stays."""
    con = _connect(path)
    try:
        with con:
            con.execute("DELETE FROM records WHERE seq <= ?", (upto,))
    finally:
        con.close()


def overlay(con: duckdb.DuckDBPyConnection, db: str | Path) -> int:
    """Show the journal through a read-only connection (module docstring): each journaled table with
    pending records is shadowed by a temporary view of its stored rows plus the journaled rows whose
    key is not stored. Returns the records shown."""
    path = journal_path(db)
    if not path.exists():
        return 0
    catalog = _catalog(con)
    _load(con, path, "journal", catalog)
    shown = 0
    for table in sorted(JOURNALED):
        if not _exists(con, f"journal_{table}"):
            continue
        columns, keys = _columns(con, catalog, table)
        names = ", ".join(f'"{n}"' for n, _t in columns)
        stored = f'"{catalog}".main."{table}"'
        match = " AND ".join(f'm."{k}" = j."{k}"' for k in keys) or "FALSE"
        partition = ", ".join(f'"{k}"' for k in keys) or "1"
        con.execute(f'CREATE TEMP VIEW "{table}" AS SELECT {names} FROM {stored} UNION ALL SELECT {names} FROM '
                    f'(SELECT *, row_number() OVER (PARTITION BY {partition}) AS journal_n FROM "journal_{table}") j '
                    f'WHERE j.journal_n = 1 AND NOT EXISTS (SELECT 1 FROM {stored} m WHERE {match})')
        shown += int(con.execute(f'SELECT count(*) FROM "journal_{table}"').fetchall()[0][0])
    return shown
