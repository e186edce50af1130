"""Module-level `Work` callables for the `ProcessExecutor` tests: spawned processes import them by name.

A unit "die" ends its process at once (as a crash in native code would), "hang" sleeps far past any
limit; every other unit is upper-cased."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence


def setup() -> None:
    return None


def process(_worker: None, units: Sequence[str]) -> list[str]:
    out = []
    for u in units:
        if u == "die":
            os._exit(13)
        if u == "hang":
            time.sleep(3600)
        out.append(u.upper())
    return out


def isolate(unit: str, reason: str) -> list[str]:
    return [f"failed {unit}: {reason}"]


def broken_setup() -> None:
    raise ImportError("the worker's library is missing")


def process_raising(_worker: None, units: Sequence[str]) -> list[str]:
    """"bad" raises (a bug that one unit's data triggers), "oom" raises MemoryError (the machine's),
    "spin" loops in Python until interrupted (a unit past its time limit)."""
    out = []
    for u in units:
        if u == "bad":
            raise ValueError(f"cannot handle {u}")
        if u == "oom":
            raise MemoryError("the machine is out of memory")
        if u == "spin":
            while True:
                pass
        out.append(u.upper())
    return out
