"""Ad-hoc reads of a store in tests (production code reads through `legival_core.store`'s typed
functions only; tests may look at any table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from legival_core.store import Store


def sql(store: Store, query: str, params: list[Any] | None = None) -> pl.DataFrame:
    return store._query(query, params)


def rows(store: Store, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return store._run(query, params)
