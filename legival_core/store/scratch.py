"""A scratch copy of a store for planning (`legival plan`): the real file is only read.

The copy is a DuckDB file in a temporary directory (deleted on close), not an in-memory database:
a paper-scale store (2 GB on disk) would need several times that in memory.

The copy holds every table, with the long texts nothing plans from left out (rollout
continuations, raw judge replies, monitor responses; generation texts are kept: a cached generation
is ingested from them). The source is attached read-only, so planning works beside a finished run
and on read-only media; a store another process is writing is refused with the lock message.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from legival_core.store.db import Store, _open_error
from legival_core.store.schema import REWARD_TABLES, RUN_TABLES, STUDY_TABLES, TABLES

_DROPPED = {
    "rollouts": ("continuation", "forced_continuation"),
    "early_answers": ("continuation", "forced_continuation"),
    "judge_results": ("raw_json",),
    "monitor_results": ("response",),
}


class ScratchStore(Store):
    """A store in its own temporary directory, removed when the store is closed."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="legival-plan-"))
        super().__init__(self._dir / "scratch.duckdb")

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def scratch_copy(source: Path | None) -> Store:
    """A new scratch store holding `source`'s rows (None or a missing file: an empty store)."""
    import duckdb

    store = ScratchStore()
    if source is None:
        return store
    try:
        store._run(f"ATTACH '{_quoted(source)}' AS src (READ_ONLY)")
    except duckdb.Error as e:
        store.close()
        raise _open_error(source, e) from e
    try:
        present = {r[0] for r in store._run(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'src'")}
        for table in sorted((TABLES - RUN_TABLES - STUDY_TABLES - REWARD_TABLES) & present):  # past runs, studies, rewards plan nothing
            cols = [r[0] for r in store._run(
                "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'src' "
                "AND table_name = ? ORDER BY ordinal_position", [table])]
            dropped = _DROPPED.get(table, ())
            select = ", ".join(f"NULL AS {c}" if c in dropped else c for c in cols)
            store._run(f"INSERT OR IGNORE INTO main.{table} ({', '.join(cols)}) SELECT {select} FROM src.{table}")
    finally:
        store._run("DETACH src")
    return store


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
