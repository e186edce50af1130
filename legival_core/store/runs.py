"""Run records (`runs`, `run_metrics`): what each `legival run` reported, and the inputs it rested on.

A run row holds the spec's name and hash, the counts of what the run computed, the versions and
parameters of every metric producer (`versions`, JSON) and the inputs per (teacher, dataset)
(`inputs`, JSON); `run_metrics` holds every reported value with its bootstrap interval, rank and
bootstrap replicates (float32 bytes), so `legival diff` can test a change against the resampling
noise of both runs. Written once per run, in one transaction; never updated.

The reads here also gather what a record stores about the store's current inputs (trace sets,
rollout counts, the producers' versions), so that SQL stays in this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

RUN_COLUMNS = ("run_id", "seq", "spec_name", "spec_hash", "spec_path", "teachers", "started_at", "ended_at",
               "flow_run_id", "ui_url", "counts", "versions", "inputs", "n_resamples", "seed")


def _have_run_tables(store: Store) -> bool:
    """A store written before run records has no run tables until a writer opens it (read-only: none)."""
    n = store._run("SELECT count(DISTINCT table_name) FROM information_schema.tables WHERE table_name IN "
                   "('runs', 'run_metrics') AND table_schema = 'main' AND table_catalog = current_database()")[0][0]
    return int(n) == 2


def add_run(store: Store, run: dict[str, Any], metrics: pl.DataFrame) -> int:
    """Store one run and its metric rows in ONE transaction; returns the run's sequence number
    (1 + the highest stored), assigned inside the transaction."""
    import polars as pl

    with store.transaction():
        seq = int(store._run("SELECT coalesce(max(seq), 0) + 1 FROM runs")[0][0])
        row = {**run, "seq": seq}
        store.insert_rows("runs", [{c: row.get(c) for c in RUN_COLUMNS}])
        if metrics.height:
            store.insert_arrow("run_metrics", metrics.with_columns(pl.lit(run["run_id"]).alias("run_id")).to_arrow())
    return seq


def runs(store: Store) -> pl.DataFrame:
    """Every stored run, oldest first (no metric rows)."""
    import polars as pl

    if not _have_run_tables(store):
        return pl.DataFrame(schema={c: (pl.Int64 if c in ("seq", "n_resamples", "seed") else pl.Utf8)
                                    for c in RUN_COLUMNS})
    return store._query(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY seq")


def run_metric_rows(store: Store, run_id: str) -> pl.DataFrame:
    """(teacher, dataset, metric, value, ci_low, ci_high, rank, samples) of one run."""
    return store._query(
        "SELECT teacher, dataset, metric, value, ci_low, ci_high, rank, samples FROM run_metrics "
        "WHERE run_id = ? ORDER BY teacher, dataset, metric", [run_id])


def metric_counts(store: Store, run_ids: Sequence[str]) -> dict[str, int]:
    """Metric rows per run (for `legival runs`)."""
    if not run_ids or not _have_run_tables(store):
        return {}
    rows = store._with_ids(list(run_ids), "SELECT m.run_id, count(*) FROM run_metrics m JOIN _ids USING (run_id) "
                                          "GROUP BY 1", name="_ids", column="run_id")
    return {str(r): int(n) for r, n in rows}


# --- what a record says about the store's inputs ---------------------------------------------------------


def trace_sets(store: Store) -> pl.DataFrame:
    """Per (teacher, dataset): the number of traces and an md5 of their sorted ids (a changed trace set
    with the same count still differs)."""
    return store._query(
        "SELECT teacher, dataset, count(*)::BIGINT AS n_traces, "
        "md5(string_agg(trace_id, ',' ORDER BY trace_id)) AS ids_md5 FROM traces GROUP BY 1, 2 ORDER BY 1, 2")


def rollout_counts(store: Store) -> pl.DataFrame:
    """Per (teacher, dataset, student key): stored rollouts."""
    return store._query(
        "SELECT t.teacher, t.dataset, r.student_key, count(*)::BIGINT AS n_rollouts FROM rollouts r "
        "JOIN traces t USING (trace_id) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")


def stored_metric_versions(store: Store) -> pl.DataFrame:
    """Per stored per-trace metric: the (params, code_version) with the most 'ok' rows, as the report
    picks them for text-quality and reward-model metrics (`report.quality_rows`)."""
    return store._query(
        "SELECT metric, params, code_version FROM (SELECT metric, params, code_version, row_number() OVER "
        "(PARTITION BY metric ORDER BY count(*) FILTER (WHERE status = 'ok') DESC, params DESC, "
        "code_version DESC) AS r FROM trace_metrics GROUP BY metric, params, code_version) WHERE r = 1 "
        "ORDER BY metric")


def judge_keys(store: Store) -> list[str]:
    """The judge keys (judge, model, prompt version) with stored verdicts."""
    return [str(r[0]) for r in store._run(
        "SELECT DISTINCT judge || ':' || model || ':' || prompt_version FROM judge_results "
        "WHERE status = 'ok' ORDER BY 1")]


def grader_versions(store: Store) -> list[str]:
    """The graders whose grades are stored."""
    return [str(r[0]) for r in store._run("SELECT DISTINCT grader FROM grades ORDER BY 1")]


def monitor_supervisors(store: Store) -> list[str]:
    return [str(r[0]) for r in store._run("SELECT DISTINCT supervisor_key FROM monitor_results ORDER BY 1")]
