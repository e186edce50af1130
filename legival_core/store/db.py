"""The DuckDB connection: opening (and refusing) a store file, transactions, idempotent bulk inserts.

Every artifact is keyed by content (primary keys), and every insert is `INSERT OR IGNORE`, so a rerun
never duplicates and a crash between two writes never leaves a half row. Bulk writes go through Arrow
tables (`INSERT ... SELECT * FROM arrow_table`), never `executemany`, which is ~1000x slower. Trace
text only ever reaches SQL as a parameter or inside an Arrow table, never in the SQL string.

DuckDB allows one process per file: only the driver process opens the store; workers return rows.
The SQL itself lives in this package only (`reads_*`, `writes`): everything else calls typed functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.store.schema import DDL, SCHEMA_VERSION, TABLES

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class InsertCounts:
    offered: int
    inserted: int


class StoreError(RuntimeError):
    """A store that cannot be opened; the message says what is wrong with the path."""


class StoreLocked(StoreError):
    """Another process holds the file (DuckDB allows one process per file)."""


class StoreMissing(StoreError, FileNotFoundError):
    """A command that reads a store was given a path where there is none."""


class StoreUnreadable(StoreError):
    """The path is not a usable DuckDB store: not a DuckDB file, truncated, a directory, not writable."""


def _open_error(path: Path, e: Exception) -> StoreError:
    """Say what is wrong: another process (a lock), or the file itself (never guess the lock)."""
    text = str(e)
    low = text.lower()
    if "lock" in low and ("conflicting" in low or "could not set lock" in low):
        return StoreLocked(f"cannot open {path}: another process holds it (DuckDB allows one process per file); "
                           "stop the other legival process using it, or use another --db")
    if "not a valid duckdb database file" in low:
        return StoreUnreadable(f"{path}: not a DuckDB store (the file exists but is not a DuckDB database)")
    if "could not read enough bytes" in low or "corrupt" in low or "checksum" in low:
        return StoreUnreadable(f"{path}: the DuckDB store is damaged or truncated ({text.removeprefix('IO Error: ')})")
    if "is a directory" in low:
        return StoreUnreadable(f"{path}: is a directory, not a DuckDB store file")
    if "permission denied" in low or "read-only file system" in low:
        return StoreUnreadable(f"{path}: cannot write there ({text.removeprefix('IO Error: ')}); "
                               "commands that only read the store open it read-only")
    return StoreUnreadable(f"cannot open {path}: {text}")


_DAMAGE = ("could not read enough bytes", "corrupt", "checksum")


def _damage_error(path: Path, e: Exception) -> StoreError | None:
    """The `StoreUnreadable` of a damaged file met after opening (a truncated store opens, and fails only
    when a query reaches its missing pages); None for any other error."""
    low = str(e).lower()
    return _open_error(path, e) if any(m in low for m in _DAMAGE) else None


class Store:
    """A DuckDB file holding problems, traces, steps, grades and every metric row.

    `create=False` refuses a path with no store (a typo must not silently create an empty one);
    `read_only=True` opens without writing anything (a store on read-only media)."""

    def __init__(self, path: str | Path, read_only: bool = False, create: bool = True) -> None:
        import duckdb

        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreMissing(f"{self.path}: no such store (create one with `legival ingest` or `legival run`)")
        if self.path.is_dir():
            raise StoreUnreadable(f"{self.path}: is a directory, not a DuckDB store file")
        try:
            if not read_only:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.con: duckdb.DuckDBPyConnection = duckdb.connect(str(self.path), read_only=read_only)
        except (duckdb.Error, OSError) as e:
            raise _open_error(self.path, e) from e
        self.read_only = read_only
        if not read_only:
            try:
                self._run(DDL)
                self._run("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
            except duckdb.Error as e:
                self.con.close()
                raise _open_error(self.path, e) from e

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the store is left exactly as it was."""
        self._run("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self._run("ROLLBACK")
            raise
        self._run("COMMIT")

    # -- generic, idempotent inserts ----------------------------------------------------------------

    def insert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> InsertCounts:
        """Insert dict rows (keys = column names) idempotently; returns how many were new."""
        if not rows:
            return InsertCounts(0, 0)
        import pyarrow as pa

        return self.insert_arrow(table, pa.Table.from_pylist(list(rows)))

    def insert_arrow(self, table: str, data: pa.Table) -> InsertCounts:
        _check_table(table)
        cols = ", ".join(data.column_names)
        before = self.count(table)
        with self._bound("_incoming", data):
            self._run(f"INSERT OR IGNORE INTO {table} ({cols}) SELECT {cols} FROM _incoming")
        return InsertCounts(data.num_rows, self.count(table) - before)

    def count(self, table: str) -> int:
        _check_table(table)
        return int(self._run(f"SELECT count(*) FROM {table}")[0][0])

    # -- private plumbing for the read/write modules of this package ----------------------------------

    @contextmanager
    def _bound(self, name: str, data: Any) -> Iterator[None]:
        """Expose an Arrow table (or polars frame) to SQL as view `name` for the duration of a block.
        Unregistering inside an aborted transaction fails; that must not hide the original error
        (the next `register` of the same name replaces the view anyway)."""
        import duckdb

        self.con.register(name, data)
        try:
            yield
        finally:
            with suppress(duckdb.Error):
                self.con.unregister(name)

    def _run(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Execute a statement and drain its result (DuckDB 2 refuses new work on a connection
        while a result is pending)."""
        import duckdb

        try:
            return self.con.execute(sql, list(params or [])).fetchall()
        except duckdb.Error as e:
            err = _damage_error(self.path, e)
            if err is None:
                raise
            raise err from e

    def _query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """A read query as a polars frame (parameters bound, never formatted into the SQL)."""
        import duckdb
        import polars as pl

        try:
            table = self.con.sql(sql, params=list(params or [])).to_arrow_table()
        except duckdb.Error as e:
            err = _damage_error(self.path, e)
            if err is None:
                raise
            raise err from e
        return pl.from_arrow(table)  # type: ignore[return-value]

    def _with_ids(self, ids: Sequence[str], sql: str, params: Sequence[Any] | None = None,
                  name: str = "_ids", column: str = "trace_id") -> list[tuple[Any, ...]]:
        """Run `sql` with the view `name(column)` bound to `ids` (a join, not an IN list)."""
        import pyarrow as pa

        if not ids:
            return []
        with self._bound(name, pa.table({column: list(ids)})):
            return self._run(sql, params)

    def _query_ids(self, ids: Sequence[str], sql: str, params: Sequence[Any] | None = None,
                   name: str = "_ids", column: str = "trace_id") -> pl.DataFrame:
        import pyarrow as pa

        with self._bound(name, pa.table({column: list(ids)}, schema=pa.schema([(column, pa.string())]))):
            return self._query(sql, params)


def _check_table(table: str) -> None:
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
