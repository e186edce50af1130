"""Units that failed alone (`legival_core.stages.isolation`): one row per (stage, unit) with the
reason and the code version that failed, so that a rerun skips them (unless `--retry-failed`, or the
code changed) and the report's coverage says "failed: N traces (reason)". A unit that later succeeds
loses its row. Trace-file records skipped at ingest (too large) are rows of stage "ingest", with the
teacher and dataset of the record (its trace is not stored).

A stage that failed as a whole for a known reason outside Legi-Val (a key refused, an endpoint that
cannot be reached: `legival_core.stages.conditions.StageFailed`) has a row per job in `stage_failures`
with its reason, until a later run of that stage completes; the report's coverage names it.

A store written before these tables existed lacks them until its first writable open; the reads here
answer "nothing failed" for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

TABLE = "unit_failures"


def _present(store: Store) -> bool:
    return bool(store._run("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [TABLE],
                           write=False)[0][0])


def record_failures(store: Store, rows: Sequence[dict[str, Any]]) -> int:
    """Store failure rows (stage, unit_key, trace_id, teacher, dataset, code_version, reason), each
    replacing an earlier failure of the same unit (the newest reason and version count)."""
    if not rows:
        return 0
    import pyarrow as pa

    cols = ("stage", "unit_key", "trace_id", "teacher", "dataset", "code_version", "reason")
    table = pa.table({c: pa.array([r.get(c) for r in rows], pa.string()) for c in cols})
    with store.transaction(), store._bound("_failed_units", table):
        store._run(f"DELETE FROM {TABLE} WHERE (stage, unit_key) IN (SELECT stage, unit_key FROM _failed_units)")
        store._run(f"INSERT OR IGNORE INTO {TABLE} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _failed_units")
    return len(rows)


def clear_failures(store: Store, stage: str, unit_keys: Sequence[str]) -> None:
    """Forget the failures of units that have now been computed."""
    if unit_keys and _present(store):
        with store.transaction():
            store._run(f"DELETE FROM {TABLE} WHERE stage = ? AND list_contains(?, unit_key)", [stage, list(unit_keys)])


def failed_units(store: Store, stage: str) -> dict[str, str]:
    """unit_key -> the code version that failed on it, for one stage."""
    if not _present(store):
        return {}
    return {k: v for k, v in store._run(f"SELECT unit_key, code_version FROM {TABLE} WHERE stage = ?", [stage],
                                        write=False)}


def failures_by_cell(store: Store) -> pl.DataFrame:
    """teacher, dataset, stage, failed (units), reason (the most frequent one, with its count): what
    coverage shows. A failure names its trace (teacher and dataset from `traces`) or, for a record that
    never became a trace, its own teacher and dataset."""
    import polars as pl

    schema = {"teacher": pl.String, "dataset": pl.String, "stage": pl.String, "failed": pl.Int64,
              "reason": pl.String}
    if not _present(store):
        return pl.DataFrame(schema=schema)
    frame = store._query(f"""
        SELECT coalesce(f.teacher, t.teacher) AS teacher, coalesce(f.dataset, t.dataset) AS dataset,
               f.stage, f.reason
        FROM {TABLE} f LEFT JOIN traces t USING (trace_id)""")
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    counted = frame.group_by("teacher", "dataset", "stage", "reason").agg(pl.len().alias("n"))
    top = counted.sort("n", "reason", descending=[True, False]).group_by(
        "teacher", "dataset", "stage", maintain_order=True).agg(
        pl.col("n").sum().cast(pl.Int64).alias("failed"), pl.col("reason").first(), pl.col("n").first().alias("top"))
    return top.select("teacher", "dataset", "stage", "failed",
                      pl.when(pl.col("top") < pl.col("failed"))
                      .then(pl.col("reason") + pl.format(" (and {} others)", pl.col("failed") - pl.col("top")))
                      .otherwise(pl.col("reason")).alias("reason")).sort("teacher", "dataset", "stage")


STAGE_TABLE = "stage_failures"


def record_stage_failure(store: Store, stage: str, job: str, reason: str) -> None:
    """A job of `stage` failed as a whole for `reason` (replacing its earlier failure)."""
    with store.transaction():
        store._run(f"DELETE FROM {STAGE_TABLE} WHERE stage = ? AND job = ?", [stage, job])
        store._run(f"INSERT INTO {STAGE_TABLE} (stage, job, reason) VALUES (?, ?, ?)", [stage, job, reason])


def clear_stage_failures(store: Store, stage: str) -> None:
    """`stage` ran to its end: its earlier failures no longer say anything about the store."""
    if store.has_table(STAGE_TABLE):
        with store.transaction():
            store._run(f"DELETE FROM {STAGE_TABLE} WHERE stage = ?", [stage])


def stage_failures(store: Store) -> dict[str, str]:
    """stage -> the reasons its failed jobs gave (`job: reason`, `;`-joined), newest first."""
    if not store.has_table(STAGE_TABLE):
        return {}
    out: dict[str, list[str]] = {}
    for stage, job, reason in store._run(
            f"SELECT stage, job, reason FROM {STAGE_TABLE} ORDER BY failed_at DESC, job", write=False):
        out.setdefault(stage, []).append(reason if job == stage else f"{job}: {reason}")
    return {k: "; ".join(v) for k, v in out.items()}
