"""Per-unit fault isolation through the real entry point (issue 26): a trace whose computation raises
fails alone, stored with its reason; every other trace is computed exactly as without it; a rerun
skips it unless `--retry-failed`; once the bug is fixed, a retry computes it and forgets the
failure; when every unit of a stage fails, the command exits 1. The bug is a plugin metric
(tests/plugins/poisoned.py) in a process of its own."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from legival_core.store import Store
from tests._cli import Ran, entry_point
from tests._sql import rows
from tests.conftest import EXAMPLES, REPO

SAMPLE = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
MARKER = "POISON-7f3a"


def efficiency(db: Path, *args: str, poison: str = MARKER) -> Ran:
    env = {**os.environ, "LEGIVAL_PLUGINS": "tests.plugins.poisoned", "LEGIVAL_TEST_POISON": poison,
           "PYTHONPATH": str(REPO)}
    return entry_point("efficiency", "--db", db, *args, env=env, cwd=REPO, timeout=600)


def ingest(db: Path, records: list[dict[str, object]], tmp: Path) -> None:
    f = tmp / f"t{len(list(tmp.glob('t*.jsonl')))}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    p = entry_point("ingest", f, "--db", db, timeout=300)
    assert p.returncode == 0, p.stderr


def metric_values(db: Path) -> dict[tuple[str, str], float]:
    with Store(db, read_only=True) as s:
        return {(t, m): v for t, m, v in rows(s, "SELECT trace_id, metric, value FROM trace_metrics")}


def failures(db: Path) -> list[tuple[str, str]]:
    with Store(db, read_only=True) as s:
        return rows(s, "SELECT stage, reason FROM unit_failures ORDER BY stage")


@pytest.fixture(scope="module")
def records() -> list[dict[str, object]]:
    recs = [json.loads(x) for x in SAMPLE.read_text().splitlines()[:6]]
    poisoned = dict(recs[0], model="poisoned-teacher", reasoning=str(recs[0]["reasoning"]) + f" {MARKER}")
    return [*recs, poisoned]


def test_a_failing_trace_fails_alone_and_is_retried_only_when_asked(tmp_path: Path,
                                                                    records: list[dict[str, object]]) -> None:
    clean, hostile = tmp_path / "clean.duckdb", tmp_path / "hostile.duckdb"
    ingest(clean, records[:-1], tmp_path)
    ingest(hostile, records, tmp_path)
    assert efficiency(clean).returncode == 0

    p = efficiency(hostile)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    s = p.summary()
    assert s["units_failed"] == 1 and s["failed_by_stage"]["efficiency"]["reason"].startswith("ValueError: poisoned")
    assert "failed: 1 efficiency unit(s) (ValueError: poisoned trace" in p.stderr
    assert failures(hostile) == [("efficiency", s["failed_by_stage"]["efficiency"]["reason"])]
    assert metric_values(hostile) == metric_values(clean)  # the others exactly as without it

    env = {**os.environ, "LEGIVAL_PLUGINS": "tests.plugins.poisoned", "PYTHONPATH": str(REPO)}
    out = tmp_path / "report"
    assert entry_point("report", "--db", hostile, "--out", out, "--resamples", "0", env=env, cwd=REPO).returncode == 0
    with (out / "coverage.csv").open(encoding="utf-8") as f:
        cells = [r for r in csv.DictReader(f) if r["teacher"] == "poisoned-teacher" and r["stage"] == "efficiency"]
    assert cells and all(r["status"] == "failed" and r["detail"].startswith("failed: 1 trace (ValueError: poisoned")
                         for r in cells), cells
    assert "failed: 1 trace (ValueError: poisoned" in (out / "index.html").read_text(encoding="utf-8")

    again = efficiency(hostile)  # skipped: it failed under this code version
    assert again.returncode == 0 and again.summary()["units_failed"] == 0
    assert "1 skipped (failed before; --retry-failed" in again.stderr

    retried = efficiency(hostile, "--retry-failed")  # tried again alone, fails again: nothing succeeded
    assert retried.returncode == 1 and retried.summary()["units_failed"] == 1

    fixed = efficiency(hostile, "--retry-failed", poison="")  # the bug fixed: computed, failure forgotten
    assert fixed.returncode == 0 and fixed.summary()["units_failed"] == 0, fixed.stderr
    assert failures(hostile) == []
    assert len(metric_values(hostile)) > len(metric_values(clean))


def test_when_every_unit_fails_the_command_exits_1(tmp_path: Path, records: list[dict[str, object]]) -> None:
    db = tmp_path / "s.duckdb"
    ingest(db, records[-1:], tmp_path)
    p = efficiency(db)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "error: every unit failed in efficiency (1): nothing was computed there" in p.stderr
    assert p.summary()["units_failed"] == 1
