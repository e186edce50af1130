"""The report of the demo store equals the snapshot taken with it (tests/fixtures/demo_store/README.md:
first taken before the spine refactor, refreshed for issue 15's second student and gCoT formulas).

`tests/fixtures/demo_store/` holds the demo's store tables (Parquet) and
`tests/fixtures/demo_report_snapshot/` the CSVs `legival report` wrote from them
(`scripts/refresh_demo_fixture.py`). This test loads the tables into a fresh DuckDB file, runs the real `legival report` entry
point (in-process, tests/_cli.py), and requires every snapshot column in every CSV, with the same rows (matched on the file's
key columns) and the same values (floats within 1e-9).

Deliberate changes since the snapshot, and only these, are allowed:
- new columns (e.g. `rr_count_ci_*`, and the stable schema of issue 13: every registered metric is a
  column whether its stage ran or not);
- new correlation rows whose rho is empty (the pairs of metrics that now always exist but have no
  value on the demo store);
- counts no longer correlated (issue 13: `n_dimensions` is a count, not a metric to correlate).
- `tu_curves.csv` `n` counts the trace curves behind each bin, not the datasets (snapshot's `n`
  column updated 2026-12-01, every other column as taken).
"""

from __future__ import annotations

import atexit
import functools
import math
import shutil
import tempfile
from pathlib import Path

import pytest

from tests._cli import legival
from tests.conftest import FIXTURES

STORE_TABLES = FIXTURES / "demo_store"
SNAPSHOT = FIXTURES / "demo_report_snapshot"

KEYS: dict[str, tuple[str, ...]] = {
    "correlations.csv": ("kind", "metric_a", "metric_b", "control"),
    "delta_tu.csv": ("teacher", "metric", "student_a", "student_b"),
    "rank_pairs.csv": ("metric", "teacher_a", "teacher_b"),
    "rank_stability.csv": ("axis", "metric", "group_a", "group_b"),
    "redundancy_elbow.csv": ("teacher", "threshold"),
    "teacher_dataset_metrics.csv": ("teacher", "dataset"),
    "teacher_dataset_student_metrics.csv": ("teacher", "dataset", "student"),
    "teacher_metrics.csv": ("teacher",),
    "tu_curves.csv": ("teacher", "bin"),
}


def load_demo_store(path: Path) -> None:
    """A store holding the demo's tables, graded by the current graders (the fixture's grades are
    those of the grader versions of its day: `legival grade --db` is how a store follows a grader
    bump, and the report below must come out the same).

    Built once per test process and copied: every caller gets its own file, byte for byte the same."""
    shutil.copyfile(_demo_store_template(), path)


@functools.cache
def _demo_store_template() -> Path:
    import pyarrow.parquet as pq

    from legival_core.stages.grade import grade_store
    from legival_core.store import Store

    folder = Path(tempfile.mkdtemp(prefix="legival-demo-store-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "demo.duckdb"
    with Store(path) as store:
        for f in sorted(STORE_TABLES.glob("*.parquet")):
            store.insert_arrow(f.stem, pq.read_table(f))
        grade_store(store)
    assert [p.name for p in folder.iterdir()] == [path.name], "the closed store must be one file (no WAL)"
    return path


def _rows(path: Path, keys: tuple[str, ...]) -> tuple[list[str], dict[tuple[str, ...], dict[str, str]]]:
    import csv

    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        columns = list(reader.fieldnames or [])
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for r in rows:
        k = tuple(r[c] for c in keys)
        if keys[1:3] == ("metric_a", "metric_b") and k[0] == "spearman":  # symmetric: pair order is not data
            k = (k[0], *sorted(k[1:3]), *k[3:])
        assert k not in out, f"{path.name}: duplicate key {k}"
        out[k] = r
    return columns, out


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) and math.isnan(y):
        return True
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)


NO_LONGER_CORRELATED = {"n_dimensions"}


def _deliberately_removed(name: str, key: tuple[str, ...]) -> bool:
    return name == "correlations.csv" and bool(NO_LONGER_CORRELATED & set(key[1:3]))


def _empty_new_row(name: str, row: dict[str, str]) -> bool:
    return name == "correlations.csv" and row.get("rho", "") == ""


def compare_to_snapshot(out: Path) -> list[str]:
    problems: list[str] = []
    for name, keys in KEYS.items():
        want_cols, want = _rows(SNAPSHOT / name, keys)
        if not (out / name).is_file():
            problems.append(f"{name}: not written")
            continue
        got_cols, got = _rows(out / name, keys)
        missing = [c for c in want_cols if c not in got_cols]
        if missing:
            problems.append(f"{name}: columns missing: {missing}")
        gone = [k for k in set(want) - set(got) if not _deliberately_removed(name, k)]
        new = [k for k in set(got) - set(want) if not _empty_new_row(name, got[k])]
        if gone or new:
            problems.append(f"{name}: rows differ: only in snapshot {sorted(gone)[:5]}, only now {sorted(new)[:5]}")
        for k in sorted(set(want) & set(got)):
            for c in want_cols:
                if c in got_cols and c not in keys and not _same(want[k][c], got[k][c]):
                    problems.append(f"{name} {k} {c}: snapshot {want[k][c]!r}, now {got[k][c]!r}")
    return problems


def test_comparison_detects_a_changed_value(tmp_path: Path) -> None:
    """The comparison itself can fail: a copy of the snapshot with one value changed is caught."""
    for f in SNAPSHOT.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    assert compare_to_snapshot(tmp_path) == []
    p = tmp_path / "teacher_dataset_metrics.csv"
    lines = p.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("fotu")] = str(float(row[header.index("fotu")]) + 1e-6)
    p.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    problems = compare_to_snapshot(tmp_path)
    assert len(problems) == 1 and "fotu" in problems[0]


@pytest.mark.slow
def test_demo_report_equals_snapshot(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    out = tmp_path / "report"
    r = legival("report", "--db", str(db), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert compare_to_snapshot(out) == []
