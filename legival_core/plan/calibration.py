"""Calibration: the rates of a throughput row fitted to what this store's runs measured on the same
engine (docs/orchestration.md, "Calibration").

Every transfer batch a run commits stores its engine seconds and its work in the cost model's units
(`transfer_timings`). For a student's engine signature (model, backend, dtype, accelerator; on a CPU
the records of this host when there are any, since the host is the engine), the newest runs'
shards, back until they hold `MIN_SECONDS` of engine time, give one factor: their measured engine
seconds over what the row's rates give for the same work. The calibrated rates are the row's times
that factor (the row keeps the proportions between its terms; the factor brings in the machine's
speed), and the engine start is the median over those runs of what their transfer took beyond the
rollouts' engine seconds (`engine_starts`: the model load, Ray and the actors, the plans; a prewarmed
engine's load counts, the time it then waited for the stages before the transfer does not). One
factor is fitted rather than five rates: a few shards of similar work cannot tell the terms apart,
and extrapolating a free fit to longer traces or another budget would be a guess.
"""

from __future__ import annotations

import socket
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from legival_core.plan.throughput import Row
from legival_core.store import Store
from legival_core.store.timings import shard_timings
from legival_core.transfer.cost import EngineWork, Rates

if TYPE_CHECKING:
    import polars as pl

MIN_SECONDS = 20.0
"""Engine seconds of recorded shards a calibration wants (newest runs first, back until reached)."""


@dataclass(frozen=True, slots=True)
class EngineRates:
    """The rates a plan uses for one student's engines, and where they come from: `basis` is
    "calibrated" (this store's recorded shards) or the table row's (measured, published, assumption);
    `spread` the factor its estimate may be off either way (1: print one number)."""

    rates: Rates
    basis: str
    spread: float
    source: str


@dataclass(frozen=True, slots=True)
class Signature:
    """An engine whose recorded shards calibrate a plan: the same model, backend, dtype and accelerator."""

    model: str
    backend: str
    dtype: str
    accelerator: str


def calibrated(store: Store, row: Row, sig: Signature, host: str | None = None) -> EngineRates | None:
    """The row's rates fitted to the store's recorded shards of `sig`; None when there are none (or
    none that computed anything)."""
    frame = shard_timings(store, sig.model, sig.backend, sig.dtype, sig.accelerator)
    frame = frame.filter(frame["compute_s"] > 0)
    if sig.accelerator == "cpu":
        here = frame.filter(frame["host"] == (host or socket.gethostname()))
        frame = here if here.height else frame
    if frame.height == 0:
        return None
    runs: list[str] = []
    seconds = 0.0
    for run_id, compute in zip(frame["run_id"].to_list(), frame["compute_s"].to_list(), strict=True):
        if run_id not in runs:
            if seconds >= MIN_SECONDS:
                break
            runs.append(run_id)
        seconds += compute
    used = frame.filter(frame["run_id"].is_in(runs))
    base = row.rates()
    modelled = sum(base.seconds(EngineWork(r["chunks"], r["prefill"], r["decode_steps"], r["decode"], r["context"]))
                   for r in used.iter_rows(named=True))
    factor = float(used["compute_s"].sum()) / modelled if modelled > 0 else 1.0
    starts = engine_starts(used)
    load = statistics.median(starts) if starts else base.load_s
    rates = replace(base.times(factor), load_s=load)
    where = f"run {runs[0]}" if len(runs) == 1 else f"runs {runs[0]} and {len(runs) - 1} before it"
    hosts = sorted(set(used["host"].to_list()))
    source = (f"calibrated on {used.height} shard(s) of {where} ({float(used['compute_s'].sum()):,.0f} engine-s on "
              f"{', '.join(hosts)}): {factor:.2f} x the costs of the {row.accelerator} row ({row.basis}), "
              + (f"engine start {load:.0f} s measured" if starts else f"engine start {load:.0f} s from the row"))
    return EngineRates(rates, "calibrated", 1.0, source)


def engine_starts(shards: pl.DataFrame) -> list[float]:
    """Per (run, student) whose engines loaded a model: what its transfer took beyond its rollouts'
    engine seconds spread over its engines, measured as a run measures its transfer
    (`plan_vs_actual`): from the first shard's plan to the last commit, plus the part of each
    engine's model load that ran before that plan (a prewarmed engine: the load only, never the
    time it then waited while the stages before the transfer ran; engines load side by side, so
    the longest such part). What is left is the engine start: the model load, Ray and the actors,
    the plans and the last commit."""
    out = []
    for (_run, _student), g in shards.group_by(["run_id", "student"], maintain_order=True):
        if not (g["load_s"] > 0).any():
            continue
        began = min(g["shard_started"].to_list())
        loads = zip((t for ts in g["load_starts"].to_list() for t in ts),
                    (s for ls in g["load_lengths"].to_list() for s in ls), strict=True)
        before = max((max(0.0, min(began, t0 + s) - t0) for t0, s in loads), default=0.0)
        wall = max(g["ended"].to_list()) - began + before
        engines = max(1, *g["engines"].to_list())
        out.append(max(0.0, wall - float(g["compute_s"].sum()) / engines))
    return out
