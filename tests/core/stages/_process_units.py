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
