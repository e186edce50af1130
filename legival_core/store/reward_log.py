"""What a training loop's reward scored (`reward_log`, docs/reward.md "The Goodhart watch"): written
through the store's journal by the reward server and the in-process adapters; read here (a read-only
open shows the journal's rows too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


def reward_names(store: Store) -> list[str]:
    if not store.has_table("reward_log"):
        return []
    return [r[0] for r in store._run("SELECT DISTINCT reward_name FROM reward_log ORDER BY 1")]


def reward_rows(store: Store, name: str | None = None) -> pl.DataFrame:
    """Every logged item (of reward `name` when given), oldest first: reward_name, spec_hash, source,
    step, tag, group_id, reward, correct, transfer, watch, components, scored_at."""
    return store._query(
        "SELECT reward_name, spec_hash, source, step, tag, group_id, reward, correct, transfer, watch, components, "
        "scored_at FROM reward_log WHERE (? IS NULL OR reward_name = ?) ORDER BY scored_at, log_key", [name, name])
