"""The generation cache: one row per (model, prompt, decoding, problem), so a rerun generates nothing.
The `generations` table is defined with the others in `legival_core/store.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.store import Store
from legival_core.types import canonical_json, content_hash

COLUMNS = ("cache_key", "model", "teacher", "dataset", "problem_id", "prompt_hash", "decoding", "text",
           "reasoning_content", "finish_reason", "prompt_tokens", "completion_tokens")


def cache_key(model: str, prompt: str, decoding: dict[str, Any], dataset: str, problem_id: str) -> str:
    """Hash of what changes the output: model, exact prompt, applied decoding, problem. The teacher
    name is not in it (the same model under two names reuses generations)."""
    return content_hash(model, prompt, canonical_json(decoding), dataset, problem_id)


def ensure_table(store: Store) -> None:
    """Kept for callers; the table is created with the store's schema."""
    return None


def cached(store: Store, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    if not keys:
        return {}
    return {r["cache_key"]: r for r in store.rows_by_key("generations", "cache_key", keys)}


def insert(store: Store, rows: Sequence[dict[str, Any]]) -> int:
    return store.insert_rows("generations", [{c: r.get(c) for c in COLUMNS} for r in rows]).inserted
