"""What a transfer stage records of its cost (`transfer_timings`): one row per committed batch, what
the plan calibrates on (`legival_core.plan.calibration`), and what the engines report of themselves."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.backends.base import TextBackend
from legival_core.catalog import canonical_model
from legival_core.transfer.rollout_plan import StudentConfig


@dataclass(frozen=True, slots=True)
class Timing:
    """Where a stage's `transfer_timings` rows go: the run (a `legival run` id, or one made for a
    `legival transfer` or `legival calibrate`), what made it (`source`), and the engines' kind as the
    plan names it (`Execution.accelerator_kind`: cpu, h100-80gb...) and how many there were."""

    run_id: str
    source: str
    accelerator: str
    engines: int = 1


def timing_row(t: Timing, c: StudentConfig, teacher: str | None, dataset: str | None, results: Sequence[Any],
               summary: Any) -> dict[str, Any]:
    """The `transfer_timings` row of one committed batch of `RolloutBatch`es (the sum of their chunks),
    the `batch`-th of its stage run (`summary`: the stage's `TransferSummary` so far)."""
    stats: dict[str, float] = {}
    for b in results:
        for k, v in b.stats.items():
            stats[k] = stats.get(k, 0) + v
    started = [b.load_started for b in results if b.load_started is not None]
    device = next((b.device for b in results if b.device), summary.device)
    return {
        "run_id": t.run_id, "source": t.source, "teacher": teacher or "*", "dataset": dataset or "*",
        "student": c.name, "student_key": c.student_key, "batch": summary.batches,
        "model": canonical_model(c.model), "backend": c.backend, "dtype": c.dtype,
        "accelerator": t.accelerator or ("cpu" if device.startswith("cpu") else ""), "device": device,
        "host": next((b.host for b in results if b.host), summary.host), "engines": t.engines,
        "chunks": int(stats.get("chunks", 0)), "rollouts": sum(len(b.rows) for b in results),
        "forced": int(stats.get("forced", 0)), "prefill": stats.get("prefill_computed", 0),
        "decode_steps": stats.get("decode_steps", 0), "decode": stats.get("decode_tokens", 0),
        "context": stats.get("context", 0), "compute_s": stats.get("compute_s", 0.0),
        "load_s": stats.get("load_s", 0.0), "load_started": min(started) if started else None,
        "shard_started": summary.started, "committed": time.time(),
    }


def take_load(backend: TextBackend) -> tuple[float, float] | None:
    """(started, seconds) of the backend's model load, once (`LazyBackend.take_load`); None after, or
    for a backend built by the caller."""
    take = getattr(type(backend), "take_load", None)
    return take(backend) if take is not None else None
