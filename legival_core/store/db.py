"""The DuckDB connection: opening (and refusing) a store file, transactions, idempotent bulk inserts.

Every artifact is keyed by content (primary keys), and every insert is `INSERT OR IGNORE`, so a rerun
never duplicates and a crash between two writes never leaves a half row. Bulk writes go through Arrow
tables (`INSERT ... SELECT * FROM arrow_table`), never `executemany`, which is ~1000x slower. Trace
text only ever reaches SQL as a parameter or inside an Arrow table, never in the SQL string.

DuckDB allows one process per file: only the driver process opens the store; workers return rows.
The SQL itself lives in this package only (`reads_*`, `writes`): everything else calls typed functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.store.migrations import MigrationFailed, UnknownVersion, migrate, stored_version
from legival_core.store.schema import DDL, SCHEMA_VERSION, TABLES

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class InsertCounts:
    offered: int
    inserted: int


@dataclass(slots=True)
class _Transaction:
    """The open transaction's inserts, kept so that it can be replayed after a key conflict."""

    inserts: list[tuple[str, Any]] = field(default_factory=list)
    optimistic: bool = True
    """Inserts try a plain INSERT first (see `Store.insert_arrow`)."""


class StoreError(RuntimeError):
    """A store that cannot be opened; the message says what is wrong with the path."""


class StoreLocked(StoreError):
    """Another process holds the file (DuckDB allows one process per file)."""


class StoreMissing(StoreError, FileNotFoundError):
    """A command that reads a store was given a path where there is none."""


class StoreUnreadable(StoreError):
    """The path is not a usable DuckDB store: not a DuckDB file, truncated, a directory, not writable."""


class StoreTooNew(StoreError):
    """The store records a schema version newer than this code's (`SCHEMA_VERSION`): refused, unchanged."""


class StoreOutdated(StoreError):
    """A read-only open of a store of an older schema: it is migrated only by a writable open."""


class StoreMigrationFailed(StoreError):
    """A migration step failed; its transaction was rolled back, so the store is as it was."""


def _open_error(path: Path, e: Exception) -> StoreError:
    """Say what is wrong: another process (a lock), or the file itself (never guess the lock)."""
    text = str(e)
    low = text.lower()
    if "lock" in low and ("conflicting" in low or "could not set lock" in low):
        holder = holder_of(text)
        return StoreLocked(f"cannot open {path}: {holder or 'another process'} holds it (DuckDB allows one process "
                           "per file); wait for it to end (LEGIVAL_STORE_WAIT_S: how long a command waits), stop it, "
                           "or use another --db")
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


def holder_of(lock_error: str) -> str | None:
    """Who holds the store, from DuckDB's lock error (`... is held in /usr/bin/python3 (PID 15630)`):
    the holder's command line where /proc tells it (`legival run examples/demo.yaml` (PID 15630)), its
    PID otherwise; None when the error names no process."""
    import re

    m = re.search(r"\(PID (\d+)\)", lock_error)
    if m is None:
        return None
    pid = m.group(1)
    try:
        args = [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return f"process {pid}"
    if "legival" in args:  # python -m legival ...
        args = ["legival", *args[args.index("legival") + 1:]]
    elif args and Path(args[min(1, len(args) - 1)]).name == "legival":  # the console script
        args = ["legival", *args[2:]]
    shown = " ".join(" ".join(args).split())[:200]  # one line, however the holder was started
    return f"`{shown}` (PID {pid})"


_DAMAGE = ("could not read enough bytes", "corrupt", "checksum")


def _damage_error(path: Path, e: Exception) -> StoreError | None:
    """The `StoreUnreadable` of a damaged file met after opening (a truncated store opens, and fails only
    when a query reaches its missing pages); None for any other error."""
    low = str(e).lower()
    return _open_error(path, e) if any(m in low for m in _DAMAGE) else None


WAIT_ENV = "LEGIVAL_STORE_WAIT_S"
DEFAULT_WAIT_S = 120.0
"""How long opening a store another process holds waits for it (a short command meeting another on the
store: a report, a grade); a `legival run` that holds it for hours is named in the refusal after that."""


def store_wait_s() -> float:
    """The wait for a held store: `LEGIVAL_STORE_WAIT_S` seconds (0: refuse at once), else `DEFAULT_WAIT_S`."""
    import os

    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def _connect_waiting(path: Path, read_only: bool, wait_s: float,
                     on_wait: Callable[[str], None] | None) -> duckdb.DuckDBPyConnection:
    """Connect; while another process holds the file, retry (backing off to 1 s) for up to `wait_s`,
    telling `on_wait` once what it waits for. Any other failure, or the lock after the wait: its
    `StoreError`."""
    import time

    import duckdb

    deadline = time.monotonic() + wait_s
    pause, told = 0.05, False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except (duckdb.Error, OSError) as e:
            error = _open_error(path, e)
            if not isinstance(error, StoreLocked) or time.monotonic() >= deadline:
                raise error from e
            if not told and on_wait is not None:
                holder = holder_of(str(e)) or "another process"
                on_wait(f"waiting for {path}: {holder} holds it (up to {wait_s:g} s; {WAIT_ENV} sets how long)")
                told = True
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(1.0, pause * 2)


CHECKPOINT_THRESHOLD = "256MB"
"""Write-ahead log size at which DuckDB folds it into the file. Its default (16 MB) made a paper-scale
run checkpoint every ~16k rollouts, each checkpoint of a 6 M-rollout store taking ~1.7 s (measured in
`benchmarks/scale.py` (b): 9.6 s -> 6.3 s for 100k rows in 1,097 commits); the price is a longer WAL
replay when a crashed run's store is reopened. Closing a store checkpoints it."""


class Store:
    """A DuckDB file holding problems, traces, steps, grades and every metric row.

    `create=False` refuses a path with no store (a typo must not silently create an empty one);
    `read_only=True` opens without writing anything (a store on read-only media).

    Every open checks the schema version the store records (`migrations.py`): a newer one is refused
    (`StoreTooNew`), an older one is migrated in one transaction by a writable open (`migrated_from`
    says from which version) and refused by a read-only one (`StoreOutdated`); the file is left
    unchanged whenever the open is refused."""

    def __init__(self, path: str | Path, read_only: bool = False, create: bool = True,
                 wait_s: float | None = None, on_wait: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreMissing(f"{self.path}: no such store (create one with `legival ingest` or `legival run`)")
        if self.path.is_dir():
            raise StoreUnreadable(f"{self.path}: is a directory, not a DuckDB store file")
        if not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise _open_error(self.path, e) from e
        self.con = _connect_waiting(self.path, read_only, store_wait_s() if wait_s is None else wait_s, on_wait)
        self.read_only = read_only
        self._txn: _Transaction | None = None
        self.migrated_from: int | None = None
        """The schema version this open migrated the store from (None: it was current or new)."""
        self.journaled = 0
        """Rows of the journal this open absorbed (writable) or shows (read-only)."""
        try:
            version = self._check_version()
            if not read_only:
                self._run(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
                self._run("BEGIN TRANSACTION")
                if version is not None and version < int(SCHEMA_VERSION):
                    self._migrate(version)
                self._run(DDL)
                self._run("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
                self._run("COMMIT")
            self.journaled = self._take_journal(read_only)
        except Exception as e:
            import duckdb

            self.con.close()
            if isinstance(e, duckdb.Error):
                raise _open_error(self.path, e) from e
            raise

    def _take_journal(self, read_only: bool) -> int:
        """What the servers committed to the journal beside the store (`store/journal.py`): absorbed by a
        writable open, shown through temporary views by a read-only one. Returns the rows it took."""
        import sqlite3

        from legival_core.store.journal import absorb, journal_path, overlay

        try:
            return overlay(self.con, self.path) if read_only else absorb(self.con, self.path)
        except sqlite3.Error as e:
            raise StoreUnreadable(f"{journal_path(self.path)}: the store's journal cannot be read ({e}); the "
                                  "store itself is unchanged") from e

    def _check_version(self) -> int | None:
        """The stored schema version (None: a new store), or the refusal of a version this open cannot use."""
        try:
            version = stored_version(self.con)
        except UnknownVersion as e:
            raise StoreUnreadable(f"{self.path}: {e}; not a Legi-Val store, or a damaged one") from e
        current = int(SCHEMA_VERSION)
        if version is not None and version > current:
            raise StoreTooNew(f"{self.path}: DB was written by a newer Legi-Val (schema {version}); upgrade "
                              f"Legi-Val to use it (this one knows schema {current} and older); the store is unchanged")
        if version is not None and version < current and self.read_only:
            raise StoreOutdated(f"{self.path}: DB was written by an older Legi-Val (schema {version}; this one uses "
                                f"schema {current}); migrate it once with `legival migrate --db {self.path}` "
                                "(or any command that writes the store); opened read-only, it is unchanged")
        return version

    def _migrate(self, version: int) -> None:
        """Inside the opening transaction: every step up to `SCHEMA_VERSION`; a failure rolls all back."""
        import duckdb

        try:
            migrate(self.con, version, int(SCHEMA_VERSION))
        except MigrationFailed as e:
            with suppress(duckdb.Error):
                self._run("ROLLBACK")
            raise StoreMigrationFailed(f"{self.path}: migrating the store from schema {version} to {SCHEMA_VERSION} "
                                       f"failed at {e}; rolled back, the store is unchanged") from e
        self.migrated_from = version

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
        self._txn = _Transaction()
        try:
            yield
        except BaseException:
            self._txn = None
            self._run("ROLLBACK")
            raise
        self._txn = None
        self._run("COMMIT")

    # -- generic, idempotent inserts ----------------------------------------------------------------

    def insert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> InsertCounts:
        """Insert dict rows (keys = column names) idempotently; returns how many were new."""
        if not rows:
            return InsertCounts(0, 0)
        import pyarrow as pa

        return self.insert_arrow(table, pa.Table.from_pylist(list(rows)))

    def insert_arrow(self, table: str, data: pa.Table) -> InsertCounts:
        """The bulk path: rows whose key is stored are left alone (also repeated keys within `data`).

        DuckDB 2 runs `INSERT OR IGNORE` as a MERGE that scans every stored key of the table (tens of
        ms per statement on millions of rollouts), while a plain INSERT checks each key in the
        primary-key index. Rows are usually new (a stage commits what its plan found missing), so a
        plain INSERT goes first; if a key is stored, DuckDB aborts the transaction, and
        `_after_conflict` rolls it back, replays its earlier inserts (they succeeded from the same
        state, so they do the same again) and the rest of the transaction uses `INSERT OR IGNORE`. A
        transaction that ran any other write is not replayed: its inserts use `INSERT OR IGNORE`."""
        import duckdb

        _check_table(table)
        if data.num_rows == 0:
            return InsertCounts(0, 0)
        txn = self._txn
        if txn is None or txn.optimistic:
            try:
                inserted = self._insert(table, data, ignore=False)
            except duckdb.ConstraintException:
                self._after_conflict()
            else:
                if txn is not None:
                    txn.inserts.append((table, data))
                return InsertCounts(data.num_rows, inserted)
        return InsertCounts(data.num_rows, self._insert(table, data, ignore=True))

    def _insert(self, table: str, data: pa.Table, ignore: bool) -> int:
        cols = ", ".join(data.column_names)
        verb = "INSERT OR IGNORE INTO" if ignore else "INSERT INTO"
        with self._bound("_incoming", data):
            return int(self._run(f"{verb} {table} ({cols}) SELECT {cols} FROM _incoming", write=False)[0][0])

    def _after_conflict(self) -> None:
        """A plain INSERT met a stored key. Outside a transaction nothing was written. Inside one, DuckDB
        has aborted it: start it again with its earlier inserts, and ignore conflicts from now on."""
        txn = self._txn
        if txn is None:
            return
        self._run("ROLLBACK", write=False)
        self._run("BEGIN TRANSACTION", write=False)
        txn.optimistic = False
        for table, data in txn.inserts:
            self._insert(table, data, ignore=False)

    def count(self, table: str) -> int:
        _check_table(table)
        return int(self._run(f"SELECT count(*) FROM {table}")[0][0])

    def holds_data(self) -> bool:
        """Any row in any table but `meta` (a store just created holds none)."""
        return any(self.has_table(t) and self.count(t) for t in sorted(TABLES - {"meta"}))

    def has_table(self, table: str) -> bool:
        """Whether the file holds `table`: a table added without a schema bump (schema.py) reaches an
        older store on its next writable open, so a read-only open of such a store lacks it."""
        _check_table(table)
        return bool(self._run("SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
                              "AND table_schema = 'main' AND table_name = ?", [table])[0][0])

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

    def _run(self, sql: str, params: Sequence[Any] | None = None, write: bool = True) -> list[tuple[Any, ...]]:
        """Execute a statement and drain its result (DuckDB 2 refuses new work on a connection
        while a result is pending). Any statement but a SELECT inside a transaction counts as a write:
        the transaction's later inserts then ignore conflicts directly (`insert_arrow`)."""
        import duckdb

        if write and self._txn is not None and sql.lstrip()[:6].upper() != "SELECT":
            self._txn.optimistic = False
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
