"""The writes beyond an idempotent insert that no table's own module holds: `trace_metrics` rows
replaced, rollouts deleted, judge results replaced and judge batch states updated (and `add` /
`add_many`, idempotent inserts in a transaction of their own). Each runs in one transaction, so a crash
leaves the old rows or the new ones, never neither.

Not every write of the store is here. Where a table has a module of its own, its writes sit beside its
reads, each in one transaction (`Store.transaction`), because what is written is decided by those reads:
- `db`: the transaction itself and the idempotent inserts (`insert_rows`, `insert_arrow`), and the
  opening, which creates or migrates the tables in one transaction (`migrations`);
- `journal`: transactions of its own SQLite file beside the store (what a long-running server
  acknowledges: a study's answers and events, a reward's log; never the store itself) and `absorb`, one
  store transaction that takes them into their tables at a writable open;
- `step_events.replace_step_events`: a pair's events replaced (delete, then a plain insert), the pairs
  chosen by that module's set-based `pair_keys`;
- `failures`: the units and jobs that failed, recorded and cleared (by `stages.base.run_stage` and the
  Prefect tasks);
- `runs.add_run`: a run record and its metric rows together;
- `study.write_design`, `record_answer`, `add_event`, `study_grades.replace_study_grades`,
  `study_import.import_answers`: a human study's tables (design written once, answers one per item,
  grades replaced whole on a grader bump, an import all or nothing);
- `scratch`: the planning copy, a temporary file of its own.
A stage whose commit spans tables opens `store.transaction()` itself around `Store.insert_rows` (ingest:
a file's problems, traces and grades; grade, efficiency, transfer, generate, monitor): idempotent
inserts, one batch all or nothing.

Traces are append-only: nothing here (or anywhere) deletes or rewrites a row of `traces`, which
`planner.traces_missing_steps` relies on (and `tests/core/test_architecture.py` checks)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from legival_core.store.db import InsertCounts, Store


def add(store: Store, table: str, rows: Sequence[dict[str, Any]]) -> InsertCounts:
    """Insert rows in one transaction (idempotent: rows whose key is stored are left alone)."""
    with store.transaction():
        return store.insert_rows(table, rows)


def add_many(store: Store, tables: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[InsertCounts]:
    """Insert into several tables in ONE transaction (a file's problems, traces and grades together)."""
    with store.transaction():
        return [store.insert_rows(t, rows) for t, rows in tables]


def replace_metric_rows(
    store: Store, rows: Sequence[dict[str, Any]], metrics: Sequence[str], params: str, code_version: str,
    trace_ids: Sequence[str], replace: Sequence[str] | None = None,
) -> int:
    """Insert metric rows, first deleting the same traces' earlier rows of these metrics whose status
    is in `replace` (None: every status but 'ok'), e.g. an 'unavailable' placeholder that real scores
    now supersede. Returns how many rows were inserted."""
    if replace is None:
        cond, args = "status <> 'ok'", []
    else:
        cond, args = "list_contains(?, status)", [list(replace)]
    with store.transaction():
        store._run(
            f"DELETE FROM trace_metrics WHERE list_contains(?, metric) AND params = ? AND code_version = ? "
            f"AND {cond} AND list_contains(?, trace_id)",
            [list(metrics), params, code_version, *args, list(trace_ids)],
        )
        return store.insert_rows("trace_metrics", rows).inserted


def delete_rollouts(store: Store, keys: Any) -> int:
    """Delete the rollouts whose (trace_id, student_key, k, sample) is a row of `keys` (an Arrow table
    or polars frame with those columns), in one transaction; returns how many were deleted. The next
    transfer plan lists them as missing (a benchmark's simulated loss, or rollouts to redo)."""
    with store.transaction(), store._bound("_gone", keys):
        before = store.count("rollouts")
        store._run("DELETE FROM rollouts r USING _gone g WHERE r.trace_id = g.trace_id "
                   "AND r.student_key = g.student_key AND r.k = g.k AND r.sample = g.sample")
        return before - store.count("rollouts")


def replace_failed_judge_results(store: Store, key: str, rows: Sequence[dict[str, Any]]) -> int:
    """Store judge results; a `--retry-failed` rerun's rows replace the old `failed` rows of the same
    traces. Returns how many rows were inserted."""
    ids = [r["trace_id"] for r in rows]
    with store.transaction():
        if ids:
            store._run(
                "DELETE FROM judge_results WHERE judge_key = ? AND status = 'failed' AND list_contains(?, trace_id)",
                [key, ids],
            )
        return store.insert_rows("judge_results", rows).inserted


def record_judge_batch(store: Store, name: str, key: str, trace_ids: Sequence[str], state: str) -> None:
    with store.transaction():
        store.insert_rows("judge_batches", [{"batch_name": name, "judge_key": key,
                                             "trace_ids": json.dumps(list(trace_ids)), "state": state}])


def set_judge_batch_state(store: Store, name: str, state: str) -> None:
    with store.transaction():
        store._run("UPDATE judge_batches SET state = ? WHERE batch_name = ?", [state, name])
