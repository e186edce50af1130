"""A store made by the commit before issue 46's renames (schema 1: `transfer_timings.steps`, the
step-events stage named `steps` in the failure tables) is upgraded by a writable command in one
transaction, refused in one line naming `legival migrate` by a read-only one; its numbers are the same
after. The old store is made by that commit's own code (`git archive` of its `legival_core` into a
folder, run with it first on the path), not by today's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from legival_core.store import SCHEMA_VERSION, Store
from tests._cli import legival
from tests._sql import rows
from tests.conftest import REPO

PREVIOUS = "97cad2c"
"""The last commit whose stores are schema 1 (issue 45's landing)."""

MAKE = """
import sys
from datetime import datetime
from legival_core.store import Store, SCHEMA_VERSION
assert SCHEMA_VERSION == "1", SCHEMA_VERSION
with Store(sys.argv[1]) as s, s.transaction():
    s.insert_rows("transfer_timings", [{
        "run_id": "r1", "source": "run", "teacher": "t", "dataset": "gsm8k", "student": "smollm2-135m",
        "student_key": "k", "batch": 0, "model": "m", "backend": "embedded", "dtype": "float32",
        "accelerator": "cpu", "device": "cpu", "host": "h", "engines": 1, "chunks": 2, "rollouts": 10,
        "forced": 1, "prefill": 300.0, "steps": 57.0, "decode": 900.0, "context": 4000.0, "compute_s": 3.5,
        "load_s": 1.0, "load_started": None, "shard_started": 0.0, "committed": 4.5}])
    s.insert_rows("unit_failures", [{
        "stage": "steps", "unit_key": "u1", "trace_id": "x", "teacher": "t", "dataset": "gsm8k",
        "code_version": "1", "reason": "boom", "failed_at": datetime(2026, 12, 5)}])
print("made")
"""


@pytest.fixture(scope="module")
def old_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("v1")
    if subprocess.run(["git", "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], cwd=REPO, capture_output=True).returncode:
        pytest.skip(f"commit {PREVIOUS} is not in this clone's history (a shallow clone?): `git fetch --unshallow`")
    code = tmp / "code"
    code.mkdir()
    archive = subprocess.run(["git", "archive", PREVIOUS, "legival_core"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
    db = tmp / "old.duckdb"
    env = {**os.environ, "PYTHONPATH": str(code)}
    made = subprocess.run([sys.executable, "-c", MAKE, str(db)], cwd=tmp, env=env, capture_output=True, text=True)
    assert made.returncode == 0 and made.stdout.strip() == "made", made.stderr[-3000:]
    return db


def _copy(db: Path, to: Path) -> Path:
    shutil.copy(db, to)
    return to


def test_a_read_only_command_refuses_the_old_store_naming_the_command_that_upgrades_it(old_store: Path,
                                                                                         tmp_path: Path) -> None:
    db = _copy(old_store, tmp_path / "s.duckdb")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    line = legival("runs", "--db", str(db)).error("legival migrate --db")
    assert "schema 1" in line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("command", [["migrate"], ["efficiency"]])
def test_a_writable_command_upgrades_it_and_keeps_its_numbers(old_store: Path, tmp_path: Path,
                                                              command: list[str]) -> None:
    db = _copy(old_store, tmp_path / "s.duckdb")
    ran = legival(*command, "--db", str(db))
    assert ran.returncode == 0, ran.stderr
    assert f"migrated the store from schema 1 to {SCHEMA_VERSION}" in ran.stderr or \
        json.loads(ran.stdout.strip().splitlines()[-1]).get("to") == SCHEMA_VERSION
    with Store(db, read_only=True) as store:
        assert rows(store, "SELECT value FROM meta WHERE key = 'schema_version'") == [(SCHEMA_VERSION,)]
        assert rows(store, "SELECT decode_steps, prefill, decode FROM transfer_timings") == [(57.0, 300.0, 900.0)]
        assert rows(store, "SELECT stage, reason FROM unit_failures") == [("step_events", "boom")]
    assert legival("runs", "--db", str(db)).returncode == 0  # read-only commands take it now
