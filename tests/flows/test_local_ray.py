"""tasks/local_ray.py: a run's local Ray is started by a helper process, never forked from the driver.

Each test drives a real local Ray from a fresh Python process (as `legival run` does), so that the
after-fork hook it registers and the SIGKILL it takes stay out of the test process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.conftest import REPO  # noqa: E402

DRIVER = textwrap.dedent("""
    import os, sys, time
    # a lock another thread held at a fork: any Python run between fork and exec never returns
    os.register_at_fork(after_in_child=lambda: time.sleep(3600))
    import ray
    from legival_core.run_config import Execution
    from tasks import ray_pool

    ray_pool.ensure_ray(Execution(local_cpus=1))

    @ray.remote
    def plus_one(x):
        return x + 1

    print("result", ray.get(plus_one.remote(1)), "helper", ray_pool._local_head.process.pid, flush=True)
    if sys.argv[1] == "stop":
        ray_pool.shutdown_pools()
        print("stopped", flush=True)
    else:
        sys.stdin.read()  # wait to be killed
""")


def _driver(mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, mode], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _line(driver: subprocess.Popen[str], within_s: float = 180) -> str:
    """The driver's next line; a driver hung in Ray's start fails the test instead of hanging it."""
    import selectors

    assert driver.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(driver.stdout, selectors.EVENT_READ)
        assert sel.select(within_s), f"no line from the driver within {within_s} s: Ray's start hung"
    return driver.stdout.readline()


def _helper_tree(line: str) -> set[int]:
    """The helper's pid and its descendants' (Ray's daemons), from the driver's line."""
    words = line.split()
    assert words[:2] == ["result", "2"], line
    tree = {int(words[words.index("helper") + 1])}
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _still_running(pids: set[int], within_s: float = 60) -> set[int]:
    """The pids still running (zombies count as gone) after up to `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = {p for p in pids if _cmdline(p)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_local_ray_starts_although_a_fork_in_the_driver_would_hang() -> None:
    """The driver's after-fork hook never returns; Ray still starts (nothing of Ray is forked from the
    driver), runs a task, and the stop leaves no Ray process behind."""
    driver = _driver("stop")
    try:
        tree = _helper_tree(_line(driver))
        assert any("raylet" in _cmdline(p) for p in tree)
        rest, _ = driver.communicate(timeout=120)
        assert rest.strip() == "stopped" and driver.returncode == 0
        alive = _still_running(tree)
        assert not alive, [_cmdline(p)[:200] for p in alive]
    finally:
        driver.kill()
        driver.wait()


def test_a_killed_driver_takes_its_local_ray_along() -> None:
    """SIGKILL leaves no cleanup to the driver: the helper sees its standard input close and stops
    Ray; the daemons are fate-shared with it."""
    driver = _driver("wait")
    try:
        tree = _helper_tree(_line(driver))
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(60)
        alive = _still_running(tree)
        assert not alive, [_cmdline(p)[:200] for p in alive]
    finally:
        driver.kill()
        driver.wait()


def test_a_helper_that_fails_says_why() -> None:
    """A Ray that cannot start is an error with the helper's own last lines, not a wait."""
    from tasks.local_ray import LocalRayFailed, start_head

    with pytest.raises(LocalRayFailed) as failed:
        start_head(-3, timeout_s=120)
    message = str(failed.value)
    assert failed.value.log is not None and str(failed.value.log) in message
    failed.value.log.unlink()
    assert "exited (status 1) before Ray was up" in message and "num_cpus" in message.lower()
