"""A command run as a user runs it, watched to its very end (issue 39): its own session, its output
read through pipes to end-of-file (as CI, `| tee` or a Prefect worker read it), and, after it exits,
the processes it leaves: the test LISTS what is still alive in its session or process group and fails
on it; it never cleans up by killing the group (that would hide exactly the leak it looks for)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

PIPES_EOF_S = 5.0
"""The pipes must reach end-of-file within this many seconds of the command's exit."""
SETTLE_S = 5.0
"""No process of the command's session or group may be alive this long after its exit."""


@dataclass
class Watched:
    """A `legival` process in a session of its own, its pipes read to EOF by threads."""

    proc: subprocess.Popen[str]
    started: float
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    eof: dict[str, float] = field(default_factory=dict)
    exited: float | None = None
    _readers: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait(self, timeout: float) -> int:
        """The exit status; fails the test (the process is then SIGKILLed, and only it) past `timeout`."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the command did not exit within {timeout:g} s; stderr ends:\n{self.stderr[-3000:]}"
                                 ) from None
        self.exited = time.monotonic()
        return code

    def pipes_closed_within(self, seconds: float = PIPES_EOF_S) -> bool:
        assert self.exited is not None
        for t in self._readers:
            t.join(timeout=max(0.0, self.exited + seconds - time.monotonic()))
        return all(not t.is_alive() for t in self._readers)


def start(args: Sequence[str], env: Mapping[str, str], cwd: Path = REPO) -> Watched:
    proc = subprocess.Popen([sys.executable, "-m", "legival", *args], cwd=cwd, env=dict(env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    w = Watched(proc, time.monotonic())

    def read(stream: object, sink: list[str], name: str) -> None:
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line)
        w.eof[name] = time.monotonic()

    w._readers = [threading.Thread(target=read, args=(proc.stdout, w.out, "stdout"), daemon=True),
                  threading.Thread(target=read, args=(proc.stderr, w.err, "stderr"), daemon=True)]
    for t in w._readers:
        t.start()
    return w


def wait_for(condition: object, w: Watched, timeout: float, what: str) -> None:
    """Until `condition()` holds (the command must still run); a file or a line the command writes."""
    deadline = time.monotonic() + timeout
    wake = threading.Event()
    while not condition():  # type: ignore[operator]
        assert w.proc.poll() is None, f"the command ended before {what}: {w.stderr[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s: {w.stderr[-3000:]}"
        wake.wait(0.05)


def processes() -> list[tuple[int, int, int, str, str]]:
    """(pid, session, process group, state, command line) of every process, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        out.append((int(entry), int(fields[3]), int(fields[2]), fields[0].decode(), cmd.strip()))
    return out


def left_behind(w: Watched, extra: Sequence[int] = ()) -> list[str]:
    """What still runs, `SETTLE_S` after the command's exit, in its session or process group (or among
    `extra`, pids seen below it while it ran); zombies do not count (their parent reaps them)."""
    assert w.exited is not None
    wake = threading.Event()
    deadline = w.exited + SETTLE_S
    while True:
        alive = [f"{pid} {state} {cmd[:160]}" for pid, sid, pgid, state, cmd in processes()
                 if state != "Z" and (sid == w.pid or pgid == w.pid or pid in extra) and pid != os.getpid()]
        if not alive or time.monotonic() >= deadline:
            return alive
        wake.wait(0.1)


def below(pid: int) -> list[int]:
    """Every process below `pid` now (children, theirs, ...)."""
    from legival_core.lifecycle.children import descendants

    return descendants(pid)


def assert_ended_cleanly(w: Watched, code: int, *, extra: Sequence[int] = ()) -> None:
    """The exit status, no traceback, pipes at EOF within 5 s, nothing left 5 s after the exit."""
    assert w.proc.returncode == code, (w.proc.returncode, w.stderr[-4000:])
    assert "Traceback" not in w.stderr, w.stderr[-4000:]
    assert w.pipes_closed_within(), f"stdout/stderr still open {PIPES_EOF_S:g} s after the exit (a child holds them)"
    left = left_behind(w, extra)
    assert not left, "still running after the command's exit:\n" + "\n".join(left)


def send(w: Watched, sig: signal.Signals) -> float:
    """The signal to the command's process only (as a scheduler, Prefect or `kill` does); when."""
    w.proc.send_signal(sig)
    return time.monotonic()
