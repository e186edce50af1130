"""Process ownership (legival_core/lifecycle/children.py, legival_core/lifecycle/guardian.py): the guardian ends what a
process started when that process dies, however it dies, with every process below each child; a pid
the kernel handed to another process is never signalled; `end_all` ends the tree at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from legival_core.lifecycle.children import Child, alive, descendants, end_trees, start_time
from tests.conftest import REPO

OWNER = textwrap.dedent("""
    import subprocess, sys, time
    from legival_core.lifecycle.children import own
    # a child with a grandchild (as the Prefect server or Ray's helper has processes below it)
    child = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"])
    own(child.pid, "a test child")
    print(child.pid, flush=True)
    if sys.argv[1] == "crash":
        time.sleep(600)  # killed by the test
    sys.stdin.readline()  # the test has seen the tree
    from legival_core.lifecycle.children import end_all
    end_all()
    print("ended", flush=True)
""")


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    wake = threading.Event()
    while True:
        left = [p for p in pids if (st := start_time(p)) is not None and alive(Child(p, st, ""))]
        if not left or time.monotonic() > deadline:
            return left
        wake.wait(0.05)


def _start_owner(mode: str) -> tuple[subprocess.Popen[str], int, list[int]]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, mode], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    deadline = time.monotonic() + 30
    while not descendants(child) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    tree = [child, *descendants(child)]
    assert len(tree) == 2, tree
    return owner, child, tree


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_guardian_ends_the_children_of_an_owner_that_died(how: signal.Signals) -> None:
    owner, _child, tree = _start_owner("crash")
    guardian = [p for p in descendants(owner.pid) if p not in tree]
    assert guardian, "no guardian started at the first `own`"
    owner.send_signal(how)
    owner.wait(30)
    assert not _gone_within(tree + guardian, 10), "the owner's children outlived it"


def test_end_all_ends_the_tree_and_the_guardian_then_leaves() -> None:
    owner, _child, tree = _start_owner("end")
    assert owner.stdout is not None and owner.stdin is not None
    owner.stdin.write("go\n")
    owner.stdin.flush()
    assert owner.stdout.readline().strip() == "ended"
    assert not _gone_within(tree, 1)
    owner.wait(30)
    assert owner.returncode == 0


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = start_time(victim.pid)
        assert st is not None
        impostor = Child(victim.pid, str(int(st) + 1), "a process that had this pid before")
        assert not alive(impostor)
        assert end_trees([impostor], grace_s=0.1) == []
        assert victim.poll() is None  # untouched
        assert end_trees([Child(victim.pid, st, "the real one")], grace_s=5) == ["the real one"]
        assert victim.wait(10) == -signal.SIGTERM
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
