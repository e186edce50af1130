"""Clarity, cohesion (all-MiniLM-L6-v2) and Z3 (automatic IR extraction) on the GSM8K developer traces.

Target (issue 8): all ~2,300 traces of ../shared/data/reasoning_traces/gsm8k/*.jsonl in under 5 minutes
on a 2-core machine. Prints, per metric group, the seconds and traces/s, plus the Z3 extraction rate;
then Z3 once more in one process on a second store (the serial path, measured in the same run), the
speed-up of the worker processes, and whether both stored the same rows (`--no-baseline` skips it).
`--reference` instead prints the clarity reference statistics of those files (the values frozen in
`legival_core.quality.clarity.BUILTIN_REFERENCE`).

    .venv/bin/python benchmarks/quality.py [--shared ../shared/data] [--reference] [--no-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--reference", action="store_true", help="print the clarity reference of these files and exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip the serial Z3 run")
    args = ap.parse_args()
    files = sorted((args.shared / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    if not files:
        sys.exit(f"no trace files under {args.shared}/reasoning_traces/gsm8k")

    if args.reference:
        from legival_core.quality.clarity import build_reference

        texts = [json.loads(line)["reasoning"] for f in files for line in f.open() if line.strip()]
        print(build_reference(texts, "gsm8k-5teachers-v1", ", ".join(f.name for f in files)).to_json())
        return

    from legival_core.embed import embed
    from legival_core.stages.base import ProcessExecutor
    from legival_core.stages.efficiency import ensure_steps
    from legival_core.stages.ingest import ingest_file
    from legival_core.stages.quality import QualityConfig, compute_quality
    from legival_core.store import Store

    embed(["warm-up"], QualityConfig().embed_model)  # model load is reported apart from the metric throughput
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "bench.duckdb")
        t0 = time.perf_counter()
        n = sum(ingest_file(store, f).new_traces for f in files)
        print(f"ingest: {n} traces in {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        ensure_steps(store)
        sentences = store.count("steps")
        print(f"segment: {sentences} sentences in {time.perf_counter() - t0:.1f}s")
        total = 0.0
        times: dict[str, float] = {}
        for group in ("clarity", "cohesion", "z3"):
            t0, c0 = time.perf_counter(), time.process_time()
            s = compute_quality(store, [group])
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            total += dt
            times[group] = dt
            extra = ""
            if group == "z3":
                done = s.z3_extracted + s.z3_unparsed
                extra = (f"  extracted {s.z3_extracted}/{done} ({s.z3_extracted / max(1, done):.1%}); "
                         f"{ProcessExecutor().workers} worker processes")
            print(f"{group:9s} {s.computed[group]:5d} traces  {dt:7.1f}s  {s.computed[group] / dt:8.1f} traces/s  cpu {cpu:6.1f}s{extra}")
        print(f"total     {total:.1f}s (target < 300s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        again = compute_quality(store, ["clarity", "cohesion", "z3"])
        print(f"rerun computes: {again.computed}")
        if not args.no_baseline:
            with Store(Path(d) / "serial.duckdb") as serial:
                for f in files:
                    ingest_file(serial, f)
                t0 = time.perf_counter()
                compute_quality(serial, ["z3"], QualityConfig(z3_workers=1))
                dt = time.perf_counter() - t0
                same = _z3_rows(serial) == _z3_rows(store)
            print(f"z3 serial path (one process): {dt:.1f}s -> worker processes {dt / times['z3']:.2f}x faster; "
                  f"identical rows: {'yes' if same else 'NO'}")
        store.close()


def _z3_rows(store: object) -> list[tuple[object, ...]]:
    return store._run("SELECT trace_id, metric, value, status, detail FROM trace_metrics "  # type: ignore[attr-defined]
                      "WHERE metric LIKE 'z3_%' ORDER BY trace_id, metric")


if __name__ == "__main__":
    main()
