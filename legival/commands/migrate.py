"""`legival migrate --db PATH`: bring a store written by an older Legi-Val to this one's schema."""

from __future__ import annotations

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, out_console


@app.command()
def migrate(db: DbOption) -> None:
    """Migrate the store to this Legi-Val's schema version, in one transaction (every command that writes
    the store does it too; this one does nothing else). A newer store is refused, unchanged."""
    from legival_core.store import SCHEMA_VERSION

    with open_store(db, note=False) as store:
        migrated_from = store.migrated_from
    if migrated_from is None:
        out_console.print(f"{db}: already at schema {SCHEMA_VERSION}, nothing to do", markup=False, highlight=False)
    else:
        out_console.print(f"{db}: migrated from schema {migrated_from} to {SCHEMA_VERSION}", markup=False,
                          highlight=False)
    emit_summary({"command": "migrate", "db": str(db), "from": str(migrated_from if migrated_from is not None
                                                                    else SCHEMA_VERSION),
                  "to": SCHEMA_VERSION, "migrated": migrated_from is not None})
