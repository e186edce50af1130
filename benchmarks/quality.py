"""Clarity, cohesion (all-mpnet-base-v2) and Z3 (automatic IR extraction) on the GSM8K developer traces.

Target (issue 8): all ~2,300 traces of ../shared/data/reasoning_traces/gsm8k/*.jsonl in under 5 minutes
on a 2-core machine. Prints the cohesion model and backend, then per metric group the seconds,
traces/s and CPU seconds; then, on a second store in the same run, the reference path of each group
(cohesion embedded with PyTorch, Z3 in one process) with the speed-up and how far the rows differ
(`--no-baseline` skips it). Model loads are timed apart from the groups (one load per backend and
run). CPU seconds are this process's: Z3's worker processes are not in them, so its speed-up is wall
time only. `--traces N` takes N traces spread evenly over each file (a quick check; the figures in
docs/quality.md are from the full run). `--reference` instead prints the clarity reference
statistics of those files (the values frozen in `legival_core.quality.clarity.BUILTIN_REFERENCE`).

    .venv/bin/python benchmarks/quality.py [--shared ../shared/data] [--traces N] [--no-baseline] [--reference]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GROUPS = ("clarity", "cohesion", "z3")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--reference", action="store_true", help="print the clarity reference of these files and exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip the reference paths (PyTorch cohesion, serial Z3)")
    ap.add_argument("--traces", type=int, default=None, help="only N traces, spread evenly over the files")
    args = ap.parse_args()
    files = sorted((args.shared / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    if not files:
        sys.exit(f"no trace files under {args.shared}/reasoning_traces/gsm8k")
    records = {f.name: [json.loads(line) for line in f.open(encoding="utf-8") if line.strip()] for f in files}

    if args.reference:
        from legival_core.quality.clarity import build_reference

        texts = [r["reasoning"] for rs in records.values() for r in rs]
        print(build_reference(texts, "gsm8k-5teachers-v1", ", ".join(f.name for f in files)).to_json())
        return

    from legival_core.bulk import spread
    from legival_core.catalog import canonical_model
    from legival_core.stages.quality import QualityConfig

    if args.traces is not None:
        per_file = math.ceil(args.traces / len(files))
        records = {name: spread(rs, per_file) for name, rs in records.items()}
    cfg = QualityConfig()
    torch_cfg = replace(cfg, embed_backend="torch", z3_workers=1)
    model = canonical_model(cfg.embed_model)
    backend, load_s = _load(cfg)
    print(f"cohesion model: {model} (backend {cfg.embed_backend} -> {backend}; loaded in {load_s:.1f}s)")
    with tempfile.TemporaryDirectory() as d:
        store, n = _store(Path(d) / "bench.duckdb", records)
        times = {g: _group(store, g, cfg) for g in GROUPS}
        total = sum(t["s"] for t in times.values())
        print(f"total     {total:.1f}s for {n} traces (target < 300s for 2,294); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        again = _compute(store, list(GROUPS), cfg)
        print(f"rerun computes: {again.computed}")
        if args.no_baseline:
            store.close()
            return
        _, torch_load = _load(torch_cfg)
        print(f"reference paths on a second store (PyTorch model loaded in {torch_load:.1f}s):")
        serial, _ = _store(Path(d) / "serial.duckdb", records)
        base = {"cohesion": _group(serial, "cohesion", torch_cfg, " (PyTorch)"),
                "z3": _group(serial, "z3", torch_cfg, " (one process)")}
        print()
        print(f"{'metric':9s} {'this path: wall / cpu':>22s}   {'reference path, same run: wall / cpu':>40s}"
              f"  {'speed-up (wall / cpu)':>22s}  rows vs reference")
        print(f"{'clarity':9s} {_wc(times['clarity'])}   {'(one path: in process)':>40s}")
        coh = _diff(store, serial, "cohesion%")
        print(f"{'cohesion':9s} {_wc(times['cohesion'])}   {'PyTorch ' + _wc(base['cohesion']):>40s}  "
              f"{_speedup(base['cohesion'], times['cohesion']):>22s}  max |diff| {coh:.1e} ({model}: "
              f"{times['cohesion']['rate']:.1f} vs {base['cohesion']['rate']:.1f} sentences/s)")
        z3 = _diff(store, serial, "z3_%", detail=True)
        print(f"{'z3':9s} {_wc(times['z3'])}   {'one process ' + _wc(base['z3']):>40s}  "
              f"{_speedup(base['z3'], times['z3'], cpu=False):>22s}  {'identical' if z3 == 0 else f'max |diff| {z3:.1e}'}")
        serial.close()
        store.close()


def _load(cfg: Any) -> tuple[str, float]:
    """Load cohesion's runtime once (the stage reuses it); (runtime name, seconds)."""
    from legival_core.embed import Embedder

    t0 = time.perf_counter()
    name = Embedder(cfg.embed_model, cfg.embed_backend).runtime().name
    return name, time.perf_counter() - t0


def _store(path: Path, records: dict[str, list[dict[str, Any]]]) -> tuple[Any, int]:
    from legival_core.stages.efficiency import ensure_steps
    from legival_core.stages.ingest import ingest_records
    from legival_core.store import Store

    store = Store(path)
    t0 = time.perf_counter()
    n = sum(ingest_records(store, name, rs).new_traces for name, rs in records.items())
    t1 = time.perf_counter()
    ensure_steps(store)
    print(f"{path.name}: ingest {n} traces in {t1 - t0:.1f}s, segment {store.count('steps')} sentences in "
          f"{time.perf_counter() - t1:.1f}s")
    return store, n


def _compute(store: Any, groups: list[str], cfg: Any) -> Any:
    from legival_core.stages.quality import compute_quality

    return compute_quality(store, groups, cfg)


def _group(store: Any, group: str, cfg: Any, label: str = "") -> dict[str, float]:
    from legival_core.embed import encoded_sentences
    from legival_core.stages.base import ProcessExecutor

    e0, t0, c0 = encoded_sentences(), time.perf_counter(), time.process_time()
    s = _compute(store, [group], cfg)
    dt, cpu, encoded = time.perf_counter() - t0, time.process_time() - c0, encoded_sentences() - e0
    extra = ""
    if group == "z3":
        done = s.z3_extracted + s.z3_unparsed
        workers = 1 if cfg.z3_workers == 1 else ProcessExecutor(cfg.z3_workers).workers
        extra = f"  extracted {s.z3_extracted}/{done} ({s.z3_extracted / max(1, done):.1%}); {workers} process(es)"
    if group == "cohesion":
        extra = f"  {encoded} distinct sentences embedded, {encoded / dt:.1f}/s"
    print(f"{group:9s}{label} {s.computed[group]:5d} traces  {dt:7.1f}s  {s.computed[group] / dt:8.1f} traces/s  "
          f"cpu {cpu:6.1f}s{extra}", flush=True)
    return {"s": dt, "cpu": cpu, "rate": encoded / dt}


def _wc(t: dict[str, float]) -> str:
    return f"{t['s']:8.1f}s / {t['cpu']:7.1f}s"


def _speedup(ref: dict[str, float], new: dict[str, float], cpu: bool = True) -> str:
    wall = f"{ref['s'] / new['s']:.2f}x"
    return f"{wall} / {ref['cpu'] / max(new['cpu'], 1e-9):.2f}x" if cpu else f"{wall} / -"


def _diff(a: Any, b: Any, pattern: str, detail: bool = False) -> float:
    """Largest |value difference| between the two stores' rows of the metrics LIKE `pattern`; inf when
    their keys or statuses (and, with `detail`, their details) differ."""
    sql = ("SELECT trace_id, metric, value, status, detail FROM trace_metrics WHERE metric LIKE ? "
           "ORDER BY trace_id, metric")
    ra, rb = a._run(sql, [pattern]), b._run(sql, [pattern])
    keep = (0, 1, 3, 4) if detail else (0, 1, 3)
    if [tuple(r[i] for i in keep) for r in ra] != [tuple(r[i] for i in keep) for r in rb]:
        return math.inf
    return max((abs(x[2] - y[2]) for x, y in zip(ra, rb, strict=True) if x[2] is not None and y[2] is not None),
               default=0.0)


if __name__ == "__main__":
    main()
