"""The driver's single DuckDB connection, shared by the flow's task threads under one lock.

DuckDB allows one process per file, and a connection is not safe for concurrent use by threads, so
every task takes `locked_store(path)`: the first use opens the file (or the command opened it and
`adopt`ed it), later uses reuse it, and `close_stores()` (the flow's `finally`) closes it. Ray workers never see the store; they return rows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from legival_core.store import Store

_lock = threading.RLock()
_stores: dict[str, Store] = {}


def _key(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


@contextmanager
def locked_store(path: str | Path) -> Iterator[Store]:
    with _lock:
        key = _key(path)
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = Store(key)
        yield store


def adopt(store: Store) -> None:
    """Hand an open store to the driver: the flow's tasks use this connection, and `close_stores` (the
    flow's end) closes it. `legival run` opens the store when it checks it, before the Prefect server
    starts, and keeps it: a second run is refused then, not minutes later inside a task."""
    with _lock:
        key = _key(store.path)
        old = _stores.get(key)
        if old is not None and old is not store:
            old.close()
        _stores[key] = store


def close_stores() -> None:
    with _lock:
        for s in _stores.values():
            s.close()
        _stores.clear()
