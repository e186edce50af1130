"""Every process Legi-Val starts has an owner that ends it, on every way out (docs/orchestration.md,
"Processes and who ends them").

A command ends its children itself on a normal end, an error and a cancel (each starter's own `close`/
`stop`, and `end_all` before a forced exit). What no code of the command can do is react to its own
SIGKILL (or a crash of the interpreter): for that, each child is `own`ed, which tells a **guardian**
process about it (`legival_core/lifecycle/guardian.py`, started at the first `own`). The guardian holds the read
end of a pipe whose write end only this process has: when this process is gone, however it went, the
guardian reads end-of-file and ends every child it was told about that is still running, each with the
processes below it (SIGTERM, then SIGKILL after `GRACE_S`), then exits.

A child is named by its pid and its start time (`/proc/PID/stat`), so a pid the kernel gave to another
process meanwhile is never signalled. Processes below a child are found through `/proc` when it is
ended (Linux); elsewhere only the child itself is signalled. The guardian runs in a session of its own
with its standard streams on /dev/null: it holds no pipe of the command's and no terminal signal reaches
it (it ignores them: it must outlive a Ctrl-C of the whole process group to clean up after it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL when a process tree is ended."""


@dataclass(frozen=True, slots=True)
class Child:
    pid: int
    started: str
    """The process's start time (field 22 of /proc/PID/stat): with the pid, its identity."""
    name: str


_lock = threading.Lock()
_children: dict[int, Child] = {}
_guardian: subprocess.Popen[bytes] | None = None


def start_time(pid: int) -> str | None:
    """The start time of `pid` (clock ticks since boot) from /proc; None when it is gone (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def alive(child: Child) -> bool:
    """`child` still runs (and is the same process), a zombie counting as gone."""
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return _alive_without_proc(child.pid) if not os.path.isdir("/proc") else False
    fields = data[data.rfind(b")") + 2 :].split()
    return len(fields) > 19 and fields[0] != b"Z" and fields[19].decode() == child.started


def _alive_without_proc(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def own(pid: int, name: str) -> Child | None:
    """Register a child this process started: the guardian ends it if this process dies first.
    None when it is already gone."""
    started = start_time(pid) if os.path.isdir("/proc") else "?"
    if started is None:
        return None
    child = Child(pid, started, name)
    with _lock:
        _children[pid] = child
        _tell(f"own {pid} {started} {name}")
    return child


def disown(pid: int) -> None:
    """The child ended (or was ended) by its owner: nothing more to watch."""
    with _lock:
        if _children.pop(pid, None) is not None:
            _tell(f"disown {pid}")


def owned() -> list[Child]:
    """The children registered and still running."""
    with _lock:
        return [c for c in _children.values() if alive(c)]


def end_all(grace_s: float = GRACE_S) -> list[str]:
    """End every registered child still running, each with the processes below it (the last resort
    before a forced exit: `legival.lifecycle.cancel`); their names."""
    with _lock:
        children = list(_children.values())
        _children.clear()
    ended = end_trees(children, grace_s)
    with _lock:
        for c in children:
            _tell(f"disown {c.pid}")
    return ended


def end_trees(children: Iterable[Child], grace_s: float = GRACE_S) -> list[str]:
    """SIGTERM each live child and every process below it, SIGKILL what is left after `grace_s`;
    the names of the children that were running."""
    live = [c for c in children if alive(c)]
    procs: dict[int, str] = {}
    for c in live:
        for pid in [c.pid, *descendants(c.pid)]:
            st = start_time(pid)
            if st is not None:
                procs[pid] = st
    _signal(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    wake = threading.Event()
    while time.monotonic() < deadline and any(_same(pid, st) for pid, st in procs.items()):
        wake.wait(0.05)
    _signal({p: s for p, s in procs.items() if _same(p, s)}, signal.SIGKILL)
    return [c.name for c in live]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, ...), from /proc; [] where there is none."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids: list[int] = []
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{p}/task/{tid}/children") as f:
                    kids += [int(x) for x in f.read().split()]
        except OSError:
            continue
        for k in kids:
            if k not in out:
                out.append(k)
                todo.append(k)
    return out


def _same(pid: int, started: str) -> bool:
    return alive(Child(pid, started, ""))


def _signal(procs: dict[int, str], sig: signal.Signals) -> None:
    for pid, st in procs.items():
        if _same(pid, st):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def _tell(line: str) -> None:
    """A line to the guardian (started now when there is none); a guardian gone is started again."""
    global _guardian
    for _attempt in range(2):
        if _guardian is None or _guardian.poll() is not None:
            _guardian = _start_guardian()
            if _guardian is None:
                return
            for c in _children.values():
                if not line.startswith(f"own {c.pid} "):
                    _write(_guardian, f"own {c.pid} {c.started} {c.name}")
        if _write(_guardian, line):
            return
        _guardian = None


def _write(g: subprocess.Popen[bytes], line: str) -> bool:
    try:
        assert g.stdin is not None
        g.stdin.write((line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        g.stdin.flush()
        return True
    except (OSError, ValueError):
        return False


def _start_guardian() -> subprocess.Popen[bytes] | None:
    """The guardian process (module docstring); None when it cannot start (nothing then guards)."""
    try:
        g = subprocess.Popen([sys.executable, "-m", "legival_core.lifecycle.guardian", str(os.getpid())],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             close_fds=True, start_new_session=True)
    except OSError:
        return None
    assert g.stdin is not None
    os.set_inheritable(g.stdin.fileno(), False)  # no later child may hold the write end (EOF is the signal)
    return g
