"""The store: one DuckDB file per benchmark, and the ONLY package with SQL or a `duckdb` import.

- `db`: the connection (`Store`), transactions, idempotent Arrow inserts;
- `schema`: the tables;
- `planner`: what the stages read (what is missing, and its inputs);
- `report`, `dashboard`: what the reports and the dashboard read;
- `writes`: every write beyond an idempotent insert (replacements and state updates, in transactions);
- `migrations`: the schema version a store records, and the steps that migrate an older one.
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
