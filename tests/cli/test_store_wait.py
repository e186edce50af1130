"""Commands that meet on a store wait for each other (legival_core/store/db.py `_connect_waiting`,
docs/CLI.md): one `note:` line naming the holder, then the command runs as soon as the holder lets go;
past `LEGIVAL_STORE_WAIT_S` it is refused naming the holder. No sleep: the holder is released when the
waiting command has said it waits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from legival_core.store import Store
from tests._cli import legival
from tests.conftest import REPO

HOLD = ("import sys; from legival_core.store import Store\n"
        "s = Store(sys.argv[1])\nprint('held', flush=True)\nsys.stdin.read()\ns.close()\n")


def _holder(db: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_command_waits_for_the_store_saying_who_holds_it_then_runs(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    Store(db).close()
    holder = _holder(db)
    env = {**os.environ, "LEGIVAL_STORE_WAIT_S": "120"}
    waiting = subprocess.Popen([sys.executable, "-m", "legival", "study", "list", "--db", str(db)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert waiting.stderr is not None
        line = waiting.stderr.readline()
        assert line.startswith(f"note: waiting for {db}: ") and f"(PID {holder.pid}) holds it" in line, line
        holder.communicate("", timeout=60)  # let go: the waiting command goes on
        out, err = waiting.communicate(timeout=120)
    finally:
        for p in (holder, waiting):
            if p.poll() is None:
                p.kill()
                p.wait(30)
    assert waiting.returncode == 0, err
    assert '"command": "study list"' in out.strip().splitlines()[-1]


def test_past_the_wait_a_command_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    Store(db).close()
    holder = _holder(db)
    try:
        ran = legival("study", "list", "--db", str(db), env={"LEGIVAL_STORE_WAIT_S": "0.3"})
    finally:
        holder.communicate("", timeout=60)
    ran.error(f"(PID {holder.pid}) holds it", "LEGIVAL_STORE_WAIT_S")
    assert "note: waiting for" in ran.stderr
