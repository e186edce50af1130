"""Refresh the demo fixtures from a finished `make demo`: the store tables (tests/fixtures/demo_store/,
one Parquet file per non-empty data table) and the report snapshot (tests/fixtures/demo_report_snapshot/,
the CSVs `legival report` writes from those tables, as `tests/core/reports/test_demo_snapshot.py` builds
them). Run it only for a deliberate change of the demo's numbers, and say why in the fixture README.

    .venv/bin/python scripts/refresh_demo_fixture.py [demo-out/demo.duckdb]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORE_DIR = REPO / "tests" / "fixtures" / "demo_store"
SNAPSHOT_DIR = REPO / "tests" / "fixtures" / "demo_report_snapshot"
SKIP = {"meta", "sentence_embeddings"}
"""Bookkeeping and the embedding cache: not report inputs (the cache is rebuilt on demand)."""


def main(db: Path) -> None:
    import duckdb

    sys.path.insert(0, str(REPO))
    from tests.core.reports.test_demo_snapshot import KEYS, load_demo_store

    con = duckdb.connect(str(db), read_only=True)
    tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = 'main' ORDER BY 1").fetchall() if t not in SKIP]
    for old in STORE_DIR.glob("*.parquet"):
        old.unlink()
    for t in tables:
        if con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]:  # noqa: S608 (table names from the catalog)
            con.execute(f"COPY (SELECT * FROM \"{t}\") TO '{STORE_DIR / (t + '.parquet')}' (FORMAT parquet)")
    con.close()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "demo.duckdb"
        load_demo_store(store)
        out = Path(tmp) / "report"
        subprocess.run([sys.executable, "-m", "legival", "report", "--db", str(store), "--out", str(out)],
                       check=True, capture_output=True, cwd=REPO)
        for name in KEYS:
            shutil.copy(out / name, SNAPSHOT_DIR / name)
    print(f"refreshed {STORE_DIR} ({len(tables)} tables) and {SNAPSHOT_DIR} ({len(KEYS)} files)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "demo-out" / "demo.duckdb")
