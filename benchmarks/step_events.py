"""Step events and step effects on the paper-scale store (issue 41, docs/step_events.md).

The store is `benchmarks/scale.py`'s (`_scale_store.py`, cached under .cache/scale/, generated once
when absent: 12 teachers x 3 datasets, ~100k traces of real reasoning sentences, ~10M steps with their
r_i and lexical backtracking flags, 2 students at the SPEC depths, ~6M rollouts). The run works on a
copy of it and measures, each phase in a fresh process so that its peak RSS is its own:

(a) the step_events stage over the whole store (`run_stage(StepEventsStage())`: the inputs-key query, the inputs
    of every pair, the events, the commits);
(b) the same stage again: nothing changed, so it plans nothing (its time is the inputs-key query);
(c) the step effects over the stored events (`store.steps.step_events`, the trace table's transfer
    traces, `reports.compute.step_effects.step_analysis` with the spec's 1,000 resamples: the 2x2
    tables with their bootstrap intervals and permutation p-values, the logistic models, the
    students' agreement).

    .venv/bin/python benchmarks/step_events.py [--traces 100000] [--store PATH] [--resamples 1000] [--keep]

Targets (issue 41) on the 2-core machine: (a) < 60 s and < 4 GiB; (b) well under (a); (c) < 60 s, < 4 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _measure import load_average, machine_at_start, peak_rss_mib, run_phase  # noqa: E402

TARGETS = {"stage_s": 60.0, "stage_rss_gib": 4.0, "effects_s": 60.0, "effects_rss_gib": 4.0}


def phase_stage(db: Path) -> dict[str, Any]:
    from legival_core.stages.base import run_stage
    from legival_core.stages.step_events import StepEventsStage
    from legival_core.store import Store

    planned: list[float] = []

    def progress(_done: int, _total: int) -> None:  # first called right after the plan
        planned.append(time.perf_counter())

    with Store(db) as store:
        t0 = time.perf_counter()
        summary = run_stage(StepEventsStage(), store, progress=progress)
        wall = time.perf_counter() - t0
    return {"phase": "stage", "stage_s": round(wall, 2), "plan_s": round(planned[0] - t0, 2), **summary.as_dict(),
            "peak_rss_mib": round(peak_rss_mib())}


def phase_rerun(db: Path) -> dict[str, Any]:
    from legival_core.stages.base import run_stage
    from legival_core.stages.step_events import StepEventsStage
    from legival_core.store import Store

    with Store(db) as store:
        t0 = time.perf_counter()
        summary = run_stage(StepEventsStage(), store)
        wall = time.perf_counter() - t0
    return {"phase": "rerun", "rerun_s": round(wall, 2), **summary.as_dict(), "peak_rss_mib": round(peak_rss_mib())}


def phase_effects(db: Path, resamples: int) -> dict[str, Any]:
    import polars as pl

    from legival_core.datasets.base import current_graders
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.reports.compute.step_effects import step_analysis
    from legival_core.segment import SEGMENTER_VERSION
    from legival_core.store import Store
    from legival_core.store import planner as plan_reads
    from legival_core.store import report as reads
    from legival_core.store import step_events as step_rows

    t0 = time.perf_counter()
    with Store(db, read_only=True) as store:
        events = step_rows.step_events(store)
        graders = current_graders(plan_reads.stored_datasets(store))
        traces = reads.trace_grades(store, graders, SEGMENTER_VERSION).with_columns(
            (pl.col("correct").fill_null(False) & ~pl.col("truncated") & (pl.col("m").fill_null(0) >= 1)).alias("transfer"))
    read_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    got = step_analysis(events, traces, ReportConfig(resamples=resamples))
    analysis_s = time.perf_counter() - t1
    computed = got.effects.filter(pl.col("status") == "computed").height
    return {"phase": "effects", "effects_s": round(time.perf_counter() - t0, 2), "read_s": round(read_s, 2),
            "analysis_s": round(analysis_s, 2), "events": events.height, "effect_rows": got.effects.height,
            "computed_rows": computed, "logistic_rows": got.logistic.height, "resamples": resamples,
            "peak_rss_mib": round(peak_rss_mib())}


def main() -> None:
    from legival_core.run_config import Report, default_of

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=int, default=100_000, help="traces in all (12 teachers x 3 datasets)")
    ap.add_argument("--mean-steps", type=float, default=105.0, help="mean Punkt steps per trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", type=Path, help="the generated store (default: .cache/scale/<shape>.duckdb)")
    ap.add_argument("--resamples", type=int, default=default_of(Report, "resamples"))
    ap.add_argument("--keep", action="store_true", help="keep the working copy")
    ap.add_argument("--phase", choices=["stage", "rerun", "effects"], help=argparse.SUPPRESS)
    ap.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phase is not None:
        result = {"stage": lambda: phase_stage(a.db), "rerun": lambda: phase_rerun(a.db),
                  "effects": lambda: phase_effects(a.db, a.resamples)}[a.phase]()
        print(json.dumps(result), flush=True)
        return

    from _scale_store import ScaleShape, store_path

    store = store_path(ScaleShape(a.traces, a.mean_steps, a.seed), a.store)
    load = machine_at_start()
    if not store.exists():
        print(f"generating {store} (once; reruns and benchmarks/scale.py reuse it) ...", flush=True)
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--phase", "generate", "--db",
                               str(store), "--traces", str(a.traces), "--mean-steps", str(a.mean_steps),
                               "--seed", str(a.seed)], check=False)
        if proc.returncode != 0:
            sys.exit("generating the store failed")
    work = store.with_name(f"steps-{os.getpid()}.duckdb")
    t0 = time.perf_counter()
    shutil.copyfile(store, work)
    copy_s = time.perf_counter() - t0
    try:
        stage = run_phase(__file__, ["--phase", "stage", "--db", str(work)])
        rerun = run_phase(__file__, ["--phase", "rerun", "--db", str(work)])
        effects = run_phase(__file__, ["--phase", "effects", "--db", str(work), "--resamples", str(a.resamples)])
    finally:
        if not a.keep:
            work.unlink(missing_ok=True)
            work.with_name(work.name + ".wal").unlink(missing_ok=True)
    figures = {"stage_s": stage["stage_s"], "stage_rss_gib": round(stage["peak_rss_mib"] / 1024, 2),
               "effects_s": effects["effects_s"], "effects_rss_gib": round(effects["peak_rss_mib"] / 1024, 2)}
    ok = {k: figures[k] < TARGETS[k] for k in TARGETS}
    end_load = load_average()

    def mark(k: str) -> str:
        return "ok" if ok[k] else "MISSED"

    print(f"store: {store} ({store.stat().st_size / 2**30:.2f} GiB; copied in {copy_s:.1f} s)")
    print(f"(a) step_events stage: {stage['traces']:,} traces, {stage['pairs']:,} (trace, student) pairs, "
          f"{stage['events']:,} events in {stage['stage_s']:.1f} s (target < {TARGETS['stage_s']:g} s) {mark('stage_s')}; "
          f"its plan {stage['plan_s']:.1f} s; peak RSS {figures['stage_rss_gib']:.2f} GiB "
          f"(target < {TARGETS['stage_rss_gib']:g} GiB) {mark('stage_rss_gib')}")
    print(f"(b) rerun, nothing changed: {rerun['traces']} traces recomputed, {rerun['rerun_s']:.1f} s; "
          f"peak RSS {rerun['peak_rss_mib']:,} MiB")
    print(f"(c) step effects over {effects['events']:,} events, {effects['resamples']:,} resamples: "
          f"{effects['effects_s']:.1f} s (reads {effects['read_s']:.1f} s, analysis {effects['analysis_s']:.1f} s; "
          f"target < {TARGETS['effects_s']:g} s) {mark('effects_s')}; {effects['computed_rows']}/{effects['effect_rows']} "
          f"effect rows computed; peak RSS {figures['effects_rss_gib']:.2f} GiB (target < "
          f"{TARGETS['effects_rss_gib']:g} GiB) {mark('effects_rss_gib')}")
    print(f"machine: load average {end_load[0]} {end_load[1]} {end_load[2]} at the end", flush=True)
    print(json.dumps({"figures": figures, "targets": TARGETS, "ok": ok, "stage": stage, "rerun": rerun,
                      "effects": effects, "load_start": load, "load_end": end_load}), flush=True)


if __name__ == "__main__":
    main()
