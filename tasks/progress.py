"""Progress: Prefect progress artifacts, one callback for the CLI bar, and (optionally) a JSON-lines
progress file that a watcher can read while DuckDB is locked.

Prefect artifacts (docs/orchestration.md, "Progress"):
- per transfer shard, on its task run: key `transfer-<teacher>-x-<dataset>-x-<student>` (`artifact_key`),
  "done / total rollouts" (cached rollouts count as done), updated after every committed batch;
- on the benchmark flow run itself: key `benchmark-<spec name>` (`RunProgress`): stages done of total,
  rollouts done / total, elapsed and an estimate of the time left, updated as stages finish and as
  rollouts commit (at most once a second between stage boundaries).

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
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("legival.orchestration")

Sink = Callable[[int, int], None]
"""sink(done, total) over all rollouts of the run."""

PROGRESS_FILE_ENV = "LEGIVAL_PROGRESS_FILE"
PUBLISH_EVERY_S = 1.0
"""The run's artifact is updated at most this often between stage boundaries (an API call each)."""


def slug(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def artifact_key(shard: str) -> str:
    """`gpt-oss-120b x gsm8k x smollm2-135m` -> `transfer-gpt-oss-120b-x-gsm8k-x-smollm2-135m`."""
    return "transfer-" + (slug(shard) or "shard")


def run_artifact_key(spec_name: str) -> str:
    return "benchmark-" + (slug(spec_name) or "run")


def duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def _pct(done: int, total: int) -> float:
    return 100.0 if total == 0 else round(100.0 * done / total, 2)


@dataclass(slots=True)
class _Shard:
    done: int
    total: int
    artifact_id: Any = None


@dataclass
class RunProgress:
    """A benchmark run's overall position: `stages` in order (the flow's lap names), the transfer
    shards' rollouts, and the clock. `publish` keeps the flow run's progress artifact current."""

    title: str
    stages: list[str]
    shards_expected: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    finished: dict[str, float] = field(default_factory=dict)
    shards: dict[str, tuple[int, int]] = field(default_factory=dict)
    committed: int = 0
    failed: str | None = None
    transfer_planned_s: float | None = None
    """The plan's transfer time (`legival plan` inside the run): the time left until a rollout commits."""
    artifact_id: Any = None
    _t0: float = 0.0
    _stage_t0: float = 0.0
    _last_publish: float = float("-inf")
    _last_pct: float = 0.0

    def __post_init__(self) -> None:
        self._t0 = self._stage_t0 = self.clock()

    @property
    def current(self) -> str | None:
        return next((s for s in self.stages if s not in self.finished), None)

    def label(self, stage: str) -> str:
        return self.labels.get(stage, stage)

    def stage_done(self, stage: str) -> None:
        now = self.clock()
        if stage in self.stages and stage not in self.finished:
            self.finished[stage] = now - self._stage_t0
        self._stage_t0 = now

    def shard(self, shard: str, done: int, total: int, committed: int) -> None:
        self.shards[shard] = (done, total)
        self.committed += committed

    def rollouts(self) -> tuple[int, int]:
        return sum(d for d, _ in self.shards.values()), sum(t for _, t in self.shards.values())

    def fraction(self) -> float:
        """(stages done + the running transfer's share of rollouts done) / stages."""
        if not self.stages:
            return 1.0
        done = float(len(self.finished))
        if self.current == "transfer" and self.shards:
            d, t = self.rollouts()
            planned = len(self.shards) / max(self.shards_expected, len(self.shards))
            done += (d / t if t else 1.0) * planned
        return min(1.0, done / len(self.stages))

    def time_left(self) -> float | None:
        """Seconds: the rollouts still missing at this run's rollout rate, plus each stage still to
        run at the mean duration of the finished stages other than transfer. None until the needed
        rates exist (e.g. before the first rollout commits)."""
        now = self.clock()
        others = [s for k, s in self.finished.items() if k != "transfer"]
        typical = statistics.fmean(others) if others else None
        left = 0.0
        for stage in self.stages:
            if stage in self.finished:
                continue
            running = stage == self.current
            if stage == "transfer":
                t = self._transfer_left(now) if running else None
                if t is None:
                    return None
                left += t
            elif typical is None:
                return None
            else:
                left += max(0.0, typical - (now - self._stage_t0)) if running else typical
        return left

    def _transfer_left(self, now: float) -> float | None:
        d, t = self.rollouts()
        if self.shards and len(self.shards) < self.shards_expected:
            t = round(t * self.shards_expected / len(self.shards))  # shards not planned yet: extrapolate
        if self.shards and d >= t:
            return 0.0
        if self.committed <= 0:  # no rate measured yet: what the plan said, less the time gone
            if self.transfer_planned_s is None:
                return None
            return max(0.0, self.transfer_planned_s - (now - self._stage_t0))
        rate = self.committed / max(now - self._stage_t0, 1e-6)
        return (t - d) / rate

    def percent(self) -> float:
        """Never moves back (a new shard's plan can lower the rollout fraction)."""
        self._last_pct = max(self._last_pct, round(100.0 * self.fraction(), 2))
        return self._last_pct

    def describe(self) -> str:
        n = len(self.stages)
        cur = self.current
        if self.failed is not None:
            head = f"failed in {self.label(cur or '?')}: {self.failed}"
        elif cur is None:
            head = f"done, {n} / {n} stages"
        else:
            head = f"stage {len(self.finished) + 1} / {n}: {self.label(cur)}"
        parts = [f"{self.title}: {head}"]
        d, t = self.rollouts()
        if self.shards:
            planned = (f", {len(self.shards)} / {self.shards_expected} shards planned"
                       if len(self.shards) < self.shards_expected else "")
            parts.append(f"rollouts {d} / {t}{planned}")
        parts.append(f"elapsed {duration(self.clock() - self._t0)}")
        if cur is not None and self.failed is None:
            left = self.time_left()
            parts.append(f"time left ~{duration(left)}" if left is not None else "time left: not known yet")
        return " | ".join(parts)

    def publish(self, force: bool = False) -> None:
        """Create the artifact on the current flow run (first call) or update it."""
        now = self.clock()
        if not force and now - self._last_publish < PUBLISH_EVERY_S:
            return
        self._last_publish = now
        if self.artifact_id is None:
            self.artifact_id = _create_artifact(run_artifact_key(self.title), self.percent(), self.describe(),
                                                need_task=False)
        else:
            _update_artifact(self.artifact_id, self.percent(), self.describe())


class ProgressBoard:
    """Every shard's position (per transfer flow run), the benchmark run's `RunProgress`, the sinks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scope: str | None = None
        self._shards: dict[str, _Shard] = {}
        self._sinks: list[Sink] = []
        self.committed = 0
        self.run: RunProgress | None = None

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def clear(self) -> None:
        with self._lock:
            self._scope = None
            self._shards.clear()
            self._sinks.clear()
            self.committed = 0
            self.run = None

    def start_run(self, run: RunProgress) -> None:
        """The benchmark flow's progress (its artifact is created now, on the current flow run)."""
        with self._lock:
            self.run = run
            run.publish(force=True)

    def stage_done(self, stage: str) -> None:
        with self._lock:
            if self.run is not None:
                self.run.stage_done(stage)
                self.run.publish(force=True)

    def fail_run(self, error: BaseException) -> None:
        with self._lock:
            if self.run is not None:
                self.run.failed = f"{type(error).__name__}: {error}"[:300]
                self.run.publish(force=True)

    def end_run(self) -> None:
        with self._lock:
            self.run = None

    def plan_transfer(self, seconds: float | None) -> None:
        """The transfer time the run's plan expects (before the first commit, the time left is its)."""
        with self._lock:
            if self.run is not None:
                self.run.transfer_planned_s = seconds
                self.run.publish(force=True)

    def shard(self, shard: str, done: int, total: int, committed: int = 0) -> None:
        """Record a shard's position; publishes to its Prefect artifact, the run's, the sinks and the file."""
        with self._lock:
            scope = _flow_run_id()
            if scope != self._scope:  # a new transfer flow run: its shards get new artifacts
                self._scope, self.committed = scope, 0
                self._shards.clear()
            s = self._shards.get(shard)
            if s is None:
                s = self._shards[shard] = _Shard(done, total, _create_artifact(
                    artifact_key(shard), _pct(done, total), _describe(shard, done, total), need_task=True))
            else:
                s.done, s.total = done, total
                _update_artifact(s.artifact_id, _pct(done, total), _describe(shard, done, total))
            self.committed += committed
            all_done = sum(x.done for x in self._shards.values())
            all_total = sum(x.total for x in self._shards.values())
            for sink in self._sinks:
                sink(all_done, all_total)
            if self.run is not None:
                self.run.shard(shard, done, total, committed)
                self.run.publish(force=False)
            _append_file({"stage": "transfer", "shard": shard, "done": done, "total": total,
                          "committed": self.committed})

    def event(self, stage: str, **fields: Any) -> None:
        _append_file({"stage": stage, **fields})


BOARD = ProgressBoard()


def _describe(shard: str, done: int, total: int) -> str:
    return f"{shard}: {done} / {total} rollouts"


def _flow_run_id() -> str | None:
    try:
        from prefect.context import FlowRunContext, TaskRunContext

        task = TaskRunContext.get()
        if task is not None:
            return str(task.task_run.flow_run_id)
        flow = FlowRunContext.get()
        return str(flow.flow_run.id) if flow is not None and flow.flow_run is not None else None
    except Exception:  # noqa: BLE001  (no Prefect context: tests of `.fn`, benchmarks)
        return None


def _create_artifact(key: str, pct: float, description: str, need_task: bool) -> Any:
    """A progress artifact on the current task run (`need_task`) or flow run; None outside one."""
    try:
        from prefect.artifacts import create_progress_artifact
        from prefect.context import FlowRunContext, TaskRunContext

        if (TaskRunContext.get() if need_task else FlowRunContext.get()) is None:
            return None  # called outside Prefect (tests of `.fn`, benchmarks)
        return create_progress_artifact(pct, key=key, description=description)
    except Exception as e:  # progress display must never fail a run
        log.warning("progress artifact not created: %s", e)
        return None


def _update_artifact(artifact_id: Any, pct: float, description: str) -> None:
    if artifact_id is None:
        return
    try:
        from prefect.artifacts import update_progress_artifact

        update_progress_artifact(artifact_id, pct, description=description)
    except Exception as e:
        log.warning("progress artifact not updated: %s", e)


def _append_file(record: dict[str, Any]) -> None:
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "t": round(time.time(), 3)}, sort_keys=True) + "\n")
        f.flush()
