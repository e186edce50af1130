"""Orchestration overhead: the demo benchmark through `legival run` (Prefect + Ray) vs the same work
called directly through `legival_core` in one process; then a fully cached rerun.

Targets (issue 4): orchestrated <= 1.3x direct; cached rerun < 20 s. Both sides run as fresh
subprocesses on fresh stores (process start, imports and model loads included on both sides), so
the ratio is what a user feels. By default both start cold: an empty model cache
(LEGIVAL_CACHE_DIR, so the student is exported from its GGUF again) and, for the orchestrated side,
an empty PREFECT_HOME (Prefect migrates its database) - the orchestrated time is then the demo's
"from a fresh install" time. `--warm` keeps the user's caches.

    .venv/bin/python benchmarks/orchestration.py [--spec examples/demo.yaml] [--keep DIR]
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def direct(spec_path: str, db: str, out: str) -> dict[str, Any]:
    """The benchmark's stages called in order, in this process, with one student backend per student:
    the same work as the `benchmark` flow (ingest, efficiency, transfer, judge, quality, reports)."""
    from legival_core.backends.lazy import LazyBackend
    from legival_core.laps import Laps
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.reports.stage import build_reports
    from legival_core.run_config import load_spec
    from legival_core.stages.efficiency import compute_efficiency
    from legival_core.stages.ingest import ingest_file, select_records
    from legival_core.stages.judge import run_judge
    from legival_core.stages.quality import compute_quality
    from legival_core.stages.transfer import run_transfer
    from legival_core.store import Store
    from legival_core.transfer.students import make_student_backend

    s = load_spec(spec_path)
    totals: dict[str, Any] = {"rollouts_total": 0, "rollouts_generated": 0}
    laps = Laps()
    lap = laps.lap

    with Store(db) as store, tempfile.TemporaryDirectory() as tmp:
        for t in s.teachers:
            for p in t.traces:
                src = select_records(p, t.select, Path(tmp)) if t.select else p
                ingest_file(store, src, teacher=t.name)
        lap("ingest")
        compute_efficiency(store, s.efficiency)
        lap("efficiency")
        for st in s.students:
            cfg = s.student_config(st)
            backend = LazyBackend(lambda cfg=cfg: make_student_backend(cfg))  # type: ignore[misc]
            for t in s.teachers:
                for d in s.datasets:
                    r = run_transfer(store, backend, cfg, t.name, d, s.transfer.limit, s.execution.traces_per_chunk)
                    totals["rollouts_total"] += r.rollouts_total
                    totals["rollouts_generated"] += r.rollouts_generated
            backend.close()
        lap("transfer")
        if s.judge.enabled:
            run_judge(store, s.judge)
        lap("judge")
        if s.quality.enabled:
            compute_quality(store, s.quality.metrics)
        lap("quality")
        build_reports(store, out, ReportConfig.from_spec(s))
        lap("report")
    totals["stage_s"] = laps.seconds
    return totals


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return wall, json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="examples/demo.yaml")
    ap.add_argument("--keep", type=Path, help="write stores and reports here instead of a temp dir")
    ap.add_argument("--warm", action="store_true", help="keep the user's model cache and PREFECT_HOME")
    ap.add_argument("--direct", nargs=2, metavar=("DB", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.direct:
        print(json.dumps(direct(a.spec, *a.direct)))
        return
    base = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    work = a.keep or Path(tempfile.mkdtemp(prefix="legival-orch-"))
    work.mkdir(parents=True, exist_ok=True)
    d_env, env = dict(base), dict(base)
    if not a.warm:
        d_env["LEGIVAL_CACHE_DIR"] = str(work / "cache-direct")
        env["LEGIVAL_CACHE_DIR"] = str(work / "cache-orch")
        env["PREFECT_HOME"] = str(work / "prefect-home")
    py = sys.executable
    d_wall, d = _timed([py, __file__, "--spec", a.spec, "--direct", str(work / "direct.duckdb"),
                        str(work / "direct-report")], d_env)
    print(f"direct (legival_core, one process): {d_wall:7.1f} s  rollouts_total={d['rollouts_total']} "
          f"generated={d['rollouts_generated']}")
    run = [py, "-m", "legival", "run", a.spec, "--db", str(work / "orch.duckdb"), "--out", str(work / "orch-report")]
    o_wall, o = _timed(run, env)
    print(f"orchestrated (Prefect + Ray):       {o_wall:7.1f} s{'' if a.warm else ' (cold: = demo from a fresh install)'}  rollouts_total={o['rollouts_total']} "
          f"generated={o['rollouts_generated']}")
    print(f"ratio orchestrated / direct:        {o_wall / d_wall:7.2f} x  (target <= 1.3)")
    stages = dict(d["stage_s"])  # type: ignore[arg-type]
    orch_stages = dict(o.get("stage_s") or {})  # type: ignore[call-overload]
    print("stage seconds (direct | orchestrated): " + ", ".join(
        f"{k} {stages.get(k, 0):.1f} | {orch_stages.get(k, 0):.1f}" for k in dict.fromkeys([*stages, *orch_stages])))
    print(f"outside the stages: direct {d_wall - sum(stages.values()):.1f} s (start, imports) | orchestrated "
          f"{o_wall - sum(orch_stages.values()):.1f} s (start, imports, Prefect, flow bookkeeping)")
    c_wall, c = _timed(run, env)
    print(f"fully cached rerun:                 {c_wall:7.1f} s  generated={c['rollouts_generated']} "
          f"engines_loaded={c['engines_loaded']}  (target < 20 s)")
    if o["rollouts_total"] != d["rollouts_total"]:
        sys.exit("the two paths planned different work")


if __name__ == "__main__":
    main()
