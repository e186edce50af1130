"""Report aggregation at scale: 12 teachers x 3 datasets x 2 students x 40 rollouts per (trace, student).

Phase 1 fills a fresh DuckDB store with synthetic rows through Arrow (`tests.synthetic`);
phase 2 runs in a FRESH process so its peak RSS is the aggregation's own: `compute_report` (every
table: transfer curves, three aggregation levels, ranks, correlations, stability, Pareto, elbow) with
the full bootstrap (1,000 resamples over problems), then optionally writes the report directory.

Scale: by default 1,750 traces per (teacher, dataset) at 90-100% accuracy, so about 5,000 correct
traces per teacher reach the students: 12 x ~5,000 x 2 students x 40 depths ~ 4.8 million rollouts.
Target (issue 6): aggregation with bootstrap under 60 s and 4 GiB.

    .venv/bin/python benchmarks/aggregate.py [--traces-per-cell 1750] [--resamples 1000] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _measure import peak_rss_mib  # noqa: E402

TEACHERS = tuple(f"teacher-{i:02d}" for i in range(12))
DATASETS = ("gsm8k", "math", "gpqa")
STUDENTS = ("student-a", "student-b")


def fill(db: Path, per_cell: int) -> dict[str, object]:
    from legival_core.store import Store
    from tests.synthetic import fill_synthetic

    t0 = time.perf_counter()
    with Store(db) as store:
        counts = fill_synthetic(store, TEACHERS, DATASETS, STUDENTS, traces_per_cell=per_cell, m_range=(115, 117),
                                step_interval=3, seed=0, with_text=False, accuracy_range=(0.9, 1.0))
    return {"phase": "fill", "traces": counts.traces, "rollouts": counts.rollouts,
            "similarities": counts.similarities, "wall_s": round(time.perf_counter() - t0, 1),
            "peak_rss_mib": round(peak_rss_mib())}


def aggregate(db: Path, resamples: int, write: bool) -> dict[str, object]:
    from legival_core.reports.compute.build import ReportConfig, compute_report
    from legival_core.reports.render.bundle import bundle
    from legival_core.reports.render.files import write_report
    from legival_core.store import Store

    out: dict[str, object] = {"phase": "aggregate"}
    with Store(db, read_only=True) as store:
        t0 = time.perf_counter()
        data = compute_report(store, ReportConfig(resamples=resamples))
        out["aggregate_with_bootstrap_s"] = round(time.perf_counter() - t0, 2)
        out["peak_rss_mib_after_aggregate"] = round(peak_rss_mib())
        out["teachers"] = data.teacher_metrics.height
        out["transfer_pairs"] = data.transfer.pairs.height
        out["rollouts_counted"] = int(data.aggregates.by_dataset["n_rollouts"].sum())
        out["resamples"] = data.boot.n_resamples if data.boot else 0
        if write:
            t1 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                files = write_report(bundle(data, store), store, tmp)
                out["write_s"] = round(time.perf_counter() - t1, 2)
                out["rollouts_parquet_mib"] = round(os.path.getsize(Path(tmp) / "rollouts.parquet") / 2**20, 1)
                out["files"] = len(files)
    out["peak_rss_mib"] = round(peak_rss_mib())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces-per-cell", type=int, default=1750)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--write", action="store_true", help="also write the report directory (not timed in the target)")
    ap.add_argument("--db", type=Path, help="reuse/keep this store (filled if missing)")
    ap.add_argument("--phase", choices=["all", "aggregate"], default="all")
    args = ap.parse_args()
    if args.phase == "aggregate":
        print(json.dumps(aggregate(args.db, args.resamples, args.write)), flush=True)
        return
    tmp = None
    db = args.db
    if db is None:
        tmp = tempfile.TemporaryDirectory()
        db = Path(tmp.name) / "bench.duckdb"
    if not db.exists():
        print(json.dumps(fill(db, args.traces_per_cell)), flush=True)
    cmd = [sys.executable, __file__, "--phase", "aggregate", "--db", str(db), "--resamples", str(args.resamples)]
    if args.write:
        cmd.append("--write")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(proc.stderr)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = round(time.perf_counter() - t0, 2)
    result["target"] = "aggregate_with_bootstrap_s < 60 and peak_rss_mib_after_aggregate < 4096"
    result["ok"] = result["aggregate_with_bootstrap_s"] < 60 and result["peak_rss_mib_after_aggregate"] < 4096
    print(json.dumps(result), flush=True)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
