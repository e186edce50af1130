"""Rollout progress: a Prefect progress artifact per transfer shard, one callback for the CLI bar,
and (optionally) a JSON-lines progress file that a watcher can read while DuckDB is locked.

The progress file is the outside view of a running benchmark: DuckDB allows one process per file,
so a test or an operator cannot poll the store while `legival run` holds it. One line per event:
{"stage": ..., "shard": ..., "done": N, "total": N, "committed": N, "t": UNIX_TIME} where `committed` counts rows
written by this run so far.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("legival.orchestration")

Sink = Callable[[int, int], None]
"""sink(done, total) over all rollouts of the run."""

PROGRESS_FILE_ENV = "LEGIVAL_PROGRESS_FILE"


@dataclass(slots=True)
class _Shard:
    done: int
    total: int
    artifact_id: Any = None


class ProgressBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}
        self._sinks: list[Sink] = []
        self.committed = 0

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def clear(self) -> None:
        with self._lock:
            self._shards.clear()
            self._sinks.clear()
            self.committed = 0

    def shard(self, shard: str, done: int, total: int, committed: int = 0) -> None:
        """Record a shard's position; publishes to the Prefect artifact, the sinks and the file."""
        with self._lock:
            s = self._shards.get(shard)
            if s is None:
                s = self._shards[shard] = _Shard(done, total, _create_artifact(shard, done, total))
            else:
                s.done, s.total = done, total
                _update_artifact(s.artifact_id, shard, done, total)
            self.committed += committed
            all_done = sum(x.done for x in self._shards.values())
            all_total = sum(x.total for x in self._shards.values())
            for sink in self._sinks:
                sink(all_done, all_total)
            _append_file({"stage": "transfer", "shard": shard, "done": done, "total": total,
                          "committed": self.committed})

    def event(self, stage: str, **fields: Any) -> None:
        _append_file({"stage": stage, **fields})


BOARD = ProgressBoard()


def artifact_key(shard: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "transfer-" + (re.sub(r"[^a-z0-9]+", "-", shard.lower()).strip("-") or "shard")


def _describe(shard: str, done: int, total: int) -> str:
    return f"{shard}: {done} / {total} rollouts"


def _pct(done: int, total: int) -> float:
    return 100.0 if total == 0 else round(100.0 * done / total, 2)


def _create_artifact(shard: str, done: int, total: int) -> Any:
    try:
        from prefect.artifacts import create_progress_artifact
        from prefect.context import TaskRunContext

        if TaskRunContext.get() is None:  # called outside Prefect (tests of `.fn`, benchmarks)
            return None
        return create_progress_artifact(_pct(done, total), key=artifact_key(shard),
                                        description=_describe(shard, done, total))
    except Exception as e:  # progress display must never fail a run
        log.warning("progress artifact not created: %s", e)
        return None


def _update_artifact(artifact_id: Any, shard: str, done: int, total: int) -> None:
    if artifact_id is None:
        return
    try:
        from prefect.artifacts import update_progress_artifact

        update_progress_artifact(artifact_id, _pct(done, total), description=_describe(shard, done, total))
    except Exception as e:
        log.warning("progress artifact not updated: %s", e)


def _append_file(record: dict[str, Any]) -> None:
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "t": round(time.time(), 3)}, sort_keys=True) + "\n")
        f.flush()
