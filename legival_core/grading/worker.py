"""A persistent math-verify worker process with a hard per-call timeout.

Why a process: sympy can spend unbounded time on a pathological answer (`9^{9^{9}}`), and
math-verify's own timeout uses `signal.alarm`, which only works in the main thread. A separate process
that is killed and restarted on timeout bounds every call and keeps the caller thread-safe. Why
persistent: importing sympy costs about a second, so a process per call could not grade 300 MATH
answers in a few seconds.

How it starts: a fresh interpreter (`python -m legival_core.grading._worker_main`), i.e. spawn
semantics with no fork of a parent that may hold threads, Ray or CUDA state, talking over a
`multiprocessing.connection.Connection` on a socket pair. It is not `multiprocessing.Process` with
spawn because that re-runs the caller's `__main__` script in the child, which breaks any script
without an `if __name__ == "__main__":` guard.

A timeout is reported to the caller (graded `status="timeout"`), never swallowed, and counted in the
module-level stats that `verify_stats()` returns.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Literal

from legival_core.lifecycle.children import disown, own

DEFAULT_TIMEOUT_S = 5.0
_timeout_s = DEFAULT_TIMEOUT_S
STARTUP_TIMEOUT_S = 120.0

Outcome = Literal["equal", "different", "timeout"]


@dataclass(frozen=True, slots=True)
class VerifyStats:
    """Counts of worker calls; mergeable with `+` so per-shard stats sum to a total."""

    calls: int = 0
    timeouts: int = 0
    crashes: int = 0
    restarts: int = 0
    seconds: float = 0.0

    def __add__(self, other: VerifyStats) -> VerifyStats:
        return VerifyStats(
            self.calls + other.calls,
            self.timeouts + other.timeouts,
            self.crashes + other.crashes,
            self.restarts + other.restarts,
            self.seconds + other.seconds,
        )


_stats_lock = threading.Lock()
_stats = VerifyStats()


def verify_stats() -> VerifyStats:
    """A snapshot of the calls, timeouts, crashes and restarts since the last reset."""
    return _stats


def reset_verify_stats() -> VerifyStats:
    """Zero the counters and return what they held."""
    global _stats
    with _stats_lock:
        old, _stats = _stats, VerifyStats()
    return old


def _count(delta: VerifyStats) -> None:
    global _stats
    with _stats_lock:
        _stats = _stats + delta


def _verify_pairs(pairs: list[tuple[str, str]]) -> bool:
    """Inside the worker: True when any (gold, pred) pair verifies. Timeouts are the parent's job."""
    from math_verify import parse, verify

    for gold, pred in pairs:
        g = parse(f"${gold}$", parsing_timeout=None)
        p = parse(f"${pred}$", parsing_timeout=None)
        if g and p and verify(g, p, timeout_seconds=None):
            return True
    return False


def _serve(conn: Connection) -> None:
    """Worker main loop: import once, warm up, then answer requests until the pipe closes."""
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _verify_pairs([("\\frac{1}{2}", "0.5")])
    conn.send(("ready", None))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "verify":
                conn.send(("ok", _verify_pairs(payload)))
            elif kind == "sleep":  # test hook: a deliberately slow request, run inside the worker
                time.sleep(float(payload))
                conn.send(("ok", True))
            else:
                conn.send(("error", f"unknown request {kind!r}"))
        except Exception as e:  # math-verify raising is an answer ("different"), not a crash
            conn.send(("ok", False) if kind == "verify" else ("error", repr(e)))


class MathVerifyWorker:
    """One worker process, restarted lazily after a timeout or crash. Safe to share across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._started_once = False

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.alive and self._proc is not None else None

    def _start(self) -> Connection:
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "legival_core.grading._worker_main", str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child_sock.close()
        own(proc.pid, "a math-verify worker")
        conn = Connection(parent_sock.detach())
        try:
            if not conn.poll(STARTUP_TIMEOUT_S):
                raise RuntimeError(f"math-verify worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
            tag, _ = conn.recv()
            if tag != "ready":
                raise RuntimeError(f"math-verify worker sent {tag!r} instead of 'ready'")
        except (EOFError, OSError) as e:
            proc.kill()
            proc.wait()
            disown(proc.pid)
            conn.close()
            raise RuntimeError(f"math-verify worker failed to start (exit code {proc.returncode})") from e
        except RuntimeError:
            proc.kill()
            proc.wait()
            disown(proc.pid)
            conn.close()
            raise
        if self._started_once:
            _count(VerifyStats(restarts=1))
        self._started_once = True
        self._proc, self._conn = proc, conn
        return conn

    def _kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            disown(self._proc.pid)
        self._proc, self._conn = None, None

    def close(self) -> None:
        with self._lock:
            self._kill()

    def request(self, kind: str, payload: object, timeout_s: float = DEFAULT_TIMEOUT_S) -> Outcome:
        """Send one request; "timeout" when no answer came within `timeout_s` (the worker is killed).

        A worker that dies mid-request (out of memory, a segfault in a C extension) is restarted and
        the request retried once; a second death is reported as "timeout", because the check did not
        complete, and counted as a crash.
        """
        with self._lock:
            t0 = time.perf_counter()
            try:
                for attempt in range(2):
                    conn = self._conn if self.alive and self._conn is not None else self._start()
                    t0 = time.perf_counter()
                    try:
                        conn.send((kind, payload))
                        if not conn.poll(timeout_s):
                            self._kill()
                            _count(VerifyStats(calls=1, timeouts=1))
                            return "timeout"
                        tag, value = conn.recv()
                    except (EOFError, OSError, BrokenPipeError):
                        self._kill()
                        _count(VerifyStats(crashes=1))
                        if attempt == 1:
                            _count(VerifyStats(calls=1))
                            return "timeout"
                        continue
                    _count(VerifyStats(calls=1))
                    if tag != "ok":
                        raise RuntimeError(f"math-verify worker error: {value}")
                    return "equal" if value else "different"
                raise AssertionError("unreachable")
            finally:
                _count(VerifyStats(seconds=time.perf_counter() - t0))


_default: MathVerifyWorker | None = None
_default_lock = threading.Lock()


def default_worker() -> MathVerifyWorker:
    """The process-wide worker, created on first use and closed at interpreter exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifyWorker()
            atexit.register(_default.close)
        return _default


def set_default_timeout(seconds: float) -> float:
    """Set the per-call timeout used when a caller passes none (graders do); returns the old one."""
    global _timeout_s
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {seconds}")
    old, _timeout_s = _timeout_s, float(seconds)
    return old


def verify_in_worker(
    pairs: list[tuple[str, str]], timeout_s: float | None = None, worker: MathVerifyWorker | None = None
) -> Outcome:
    """math-verify `verify(parse($gold$), parse($pred$))` over candidate pairs, under a hard timeout."""
    return (worker or default_worker()).request(
        "verify", pairs, _timeout_s if timeout_s is None else timeout_s
    )
