"""The store: one DuckDB file per benchmark, and the ONLY package with SQL or a `duckdb` import.

- `db`: the connection (`Store`: opening, waiting for a holder, refusing), transactions, idempotent
  Arrow inserts;
- `schema`: the tables; `schema_v1` and `migrations`: the schema version a store records, and the steps
  that migrate an older one;
- read models, one per consumer: `planner` (what the stages read: what is missing, and its inputs),
  `ingest` (what a file's problems and traces meet in the store), `report` and `dashboard` (the report
  and the dashboard), `runs` (run records), `timings` (the plan's calibration), `step_events` (the step
  events, read and replaced), `study`, `study_grades` and `study_import` (human studies), `failures`
  (units and jobs that failed), `reward_log` (what a training reward scored, written through the
  journal);
- `writes`: the replacements and state updates no table's own module holds (which modules run their own
  transactions, and why: its docstring);
- `journal`: where long-running servers write instead of holding the store, absorbed by the next
  writable open (docs/architecture.md, "The journal");
- `scratch`: a scratch copy for planning.
Everything else calls these typed functions (layers checked by import-linter, `make check`).
"""

from legival_core.store.db import (
    InsertCounts,
    Store,
    StoreError,
    StoreLocked,
    StoreMigrationFailed,
    StoreMissing,
    StoreOutdated,
    StoreTooNew,
    StoreUnreadable,
)
from legival_core.store.schema import SCHEMA_VERSION, TABLES

__all__ = ["SCHEMA_VERSION", "TABLES", "InsertCounts", "Store", "StoreError", "StoreLocked", "StoreMigrationFailed",
           "StoreMissing", "StoreOutdated", "StoreTooNew", "StoreUnreadable"]
