"""reward_watch.csv: the Goodhart watch of every reward a training loop logged into this store
(docs/reward.md): per reward and step bucket, the mean reward, correctness, transfer, watch and their
gap with bootstrap bands (`rl.watch.watch_table`). One schema whatever ran: a store with no logged
reward has one row saying which command logs one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.rl.watch import SERIES, watch_table
from legival_core.store import reward_log as reads
from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

NOT_RUN = "not run: legival reward serve SPEC (a reward spec whose `store` is this store logs every scored item)"
BUCKETS = 10


def schema() -> dict[str, object]:
    import polars as pl

    out: dict[str, object] = {"reward_name": pl.Utf8, "bucket": pl.Int64, "step_from": pl.Int64, "step_to": pl.Int64,
                              "n": pl.Int64, "n_correct": pl.Int64}
    for name in SERIES:
        out |= {name: pl.Float64, f"{name}_low": pl.Float64, f"{name}_high": pl.Float64}
    return out | {"status": pl.Utf8}


def reward_watch(store: Store, resamples: int, seed: int) -> pl.DataFrame:
    import polars as pl

    frames = []
    for name in reads.reward_names(store):
        table = watch_table(reads.reward_rows(store, name), BUCKETS, resamples, seed)
        frames.append(table.with_columns(pl.lit(name).alias("reward_name"), pl.lit("computed").alias("status")))
    if not frames:
        return pl.DataFrame([{"status": NOT_RUN}], schema=schema())  # type: ignore[arg-type]
    return pl.concat(frames, how="diagonal").select(list(schema())).cast(schema())  # type: ignore[arg-type]


def reward_watch_of(data: object) -> pl.DataFrame:
    """The report's table, or the not-run row (a report computed without a store)."""
    import polars as pl

    table = getattr(data, "reward_watch", None)
    return table if table is not None else pl.DataFrame([{"status": NOT_RUN}], schema=schema())  # type: ignore[arg-type]
