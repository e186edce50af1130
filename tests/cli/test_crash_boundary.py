"""The error boundary of every command (legival/crash.py, legival_core/crashlog.py): an exception
nothing else caught is one `error:` line naming the crash log (exit 1), a condition of the machine
its own words (exit 2), also as the cause of another error; never a traceback on stderr, never a secret in the log.

The bug comes from a plugin (tests/plugins/crashing.py) loaded in a process of its own: the console
script, as a user runs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._cli import Ran, entry_point
from tests.conftest import REPO
from tests.core.reports.test_demo_snapshot import load_demo_store

SECRET = "sk-test-0123456789abcdef"


def report(tmp_path: Path, crash: str, **env: str) -> tuple[Ran, Path]:
    db = tmp_path / "store" / "demo.duckdb"
    db.parent.mkdir()
    load_demo_store(db)
    environ = {k: v for k, v in os.environ.items() if k != "LEGIVAL_CRASH_DIR"}
    environ.update({"LEGIVAL_PLUGINS": "tests.plugins.crashing", "LEGIVAL_TEST_CRASH": crash,
                    "LEGIVAL_TEST_SECRET_KEY": SECRET, "PYTHONPATH": str(REPO), **env})
    return entry_point("report", "--db", db, "--out", tmp_path / "report", env=environ, cwd=REPO, timeout=300), db


def test_a_bug_is_one_error_line_and_a_crash_log_beside_the_store(tmp_path: Path) -> None:
    p, db = report(tmp_path, "bug")
    line = p.error(code=1)
    assert "ZeroDivisionError: a plugin's bug" in line and "a bug in Legi-Val or a plugin" in line
    (log,) = (db.parent / "legival-crashes").glob("crash-*.log")
    assert f"details in {log}" in line
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "_crash" in text and "report --db" in text
    assert SECRET not in text + p.stderr + p.stdout and "<LEGIVAL_TEST_SECRET_KEY>" in text


@pytest.mark.parametrize(("crash", "words"), [
    ("disk-full", "/report/teacher_metrics.csv: no space left on the device"),
    ("permission", "/report: permission denied"),
    ("port", "the address is already in use"),
])
def test_a_condition_of_the_machine_is_exit_2_in_its_own_words(tmp_path: Path, crash: str, words: str) -> None:
    crashes = tmp_path / "crashes"
    p, _ = report(tmp_path, crash, LEGIVAL_CRASH_DIR=str(crashes))
    line = p.error()
    assert words in line and str(crashes) in line, line
    assert len(list(crashes.glob("crash-*.log"))) == 1


def test_a_plugin_that_fails_at_import_is_a_plugin_error(tmp_path: Path) -> None:
    environ = {**os.environ, "LEGIVAL_PLUGINS": "tests.plugins.broken_at_import", "PYTHONPATH": str(REPO)}
    p = entry_point("list", "metrics", env=environ, cwd=REPO, timeout=120)
    line = p.error()
    assert "plugin module 'tests.plugins.broken_at_import'" in line and "TypeError: " in line


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    """`legival CMD | head -1`: a write finds standard output's reader gone (BrokenPipeError, e.g. from
    click printing a long --help); the command stops quietly, as Unix tools do: exit 1, no error line,
    no crash log. The same error with standard output still read (an engine's pipe, a socket) is a
    failure like any other."""
    import subprocess
    import sys

    db = tmp_path / "store" / "demo.duckdb"
    db.parent.mkdir()
    load_demo_store(db)
    crashes = tmp_path / "crashes"
    env = {**os.environ, "LEGIVAL_PLUGINS": "tests.plugins.crashing", "LEGIVAL_TEST_CRASH": "broken-pipe",
           "LEGIVAL_CRASH_DIR": str(crashes), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "legival", "report", "--db", str(db), "--out", str(tmp_path / "report")]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    p = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, env=env, cwd=REPO, timeout=300, check=False)
    os.close(write)
    assert p.returncode == 1 and not p.stderr.strip(), p.stderr.decode()
    assert not crashes.exists() or not list(crashes.glob("crash-*.log"))
    read_ok = entry_point("report", "--db", db, "--out", tmp_path / "report2", env=env, cwd=REPO, timeout=300)
    assert "the library failed" in read_ok.error(code=1) and len(list(crashes.glob("crash-*.log"))) == 1
