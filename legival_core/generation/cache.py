"""The generation cache: one row per (model, prompt, decoding, problem), so a rerun generates nothing.

The DDL lives here until it moves into `store.py` (store.py's `insert_rows` only knows its own
tables, so rows go in through a registered Arrow table with `INSERT OR IGNORE`, like store.py does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.store import Store
from legival_core.types import canonical_json, content_hash

GENERATION_DDL = """
CREATE TABLE IF NOT EXISTS generations (
    cache_key VARCHAR PRIMARY KEY, model VARCHAR NOT NULL, teacher VARCHAR NOT NULL,
    dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, prompt_hash VARCHAR NOT NULL,
    decoding VARCHAR NOT NULL, text VARCHAR NOT NULL, reasoning_content VARCHAR,
    finish_reason VARCHAR NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp)
"""

COLUMNS = ("cache_key", "model", "teacher", "dataset", "problem_id", "prompt_hash", "decoding", "text",
           "reasoning_content", "finish_reason", "prompt_tokens", "completion_tokens")


def cache_key(model: str, prompt: str, decoding: dict[str, Any], dataset: str, problem_id: str) -> str:
    """Hash of what changes the output: model, exact prompt, applied decoding, problem. The teacher
    name is not in it (the same model under two names reuses generations)."""
    return content_hash(model, prompt, canonical_json(decoding), dataset, problem_id)


def ensure_table(store: Store) -> None:
    store.run(GENERATION_DDL)


def cached(store: Store, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    import pyarrow as pa

    if not keys:
        return {}
    store.con.register("_gkeys", pa.table({"cache_key": list(keys)}))
    try:
        frame = store.query("SELECT g.* FROM generations g JOIN _gkeys USING (cache_key)")
    finally:
        store.con.unregister("_gkeys")
    return {r["cache_key"]: r for r in frame.iter_rows(named=True)}


def insert(store: Store, rows: Sequence[dict[str, Any]]) -> int:
    import pyarrow as pa

    if not rows:
        return 0
    table = pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows])
    cols = ", ".join(COLUMNS)
    before = int(store.run("SELECT count(*) FROM generations")[0][0])
    store.con.register("_gen", table)
    try:
        store.run(f"INSERT OR IGNORE INTO generations ({cols}) SELECT {cols} FROM _gen")
    finally:
        store.con.unregister("_gen")
    return int(store.run("SELECT count(*) FROM generations")[0][0]) - before
