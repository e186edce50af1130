"""How `legival plan` scales with a spec's teachers (issue 38 item 7): its wall time and peak RSS at
1, 100, 1,000 and 2,000 teachers, each plan a `legival plan SPEC --db FRESH` process as a user runs it.

The spec: N teachers, each with a trace file of its own holding two real GSM8K traces (those of
examples/data/gsm8k_md_eval_cot_5teachers.jsonl, taken in turn: the teachers answer the same 16
problems, as a benchmark's teachers do), one dataset, the embedded SmolLM2 student (`--students 2`
adds the demo's Gemma 3 270M), transfer limit 2, the lexical judge, the clarity/cohesion/z3 quality
metrics; a fresh store, so the plan ingests, grades and segments every file in its scratch copy and
plans every shard (rollouts, prompt tokens, time), the efficiency, judge and quality stages.

Printed per size: the wall time of the process and the plan's own `wall_s` (the command, less the
interpreter's start), its peak RSS (`os.wait4`: the process and what it waited for), and the cost per
teacher beyond the 1-teacher plan measured in the same run (the baseline: interpreter, imports, the
tokenizer's load), with the target for the largest size: under 30 s and 1 GiB.

    .venv/bin/python benchmarks/plan_scale.py [--sizes 1,100,1000,2000] [--students 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
TARGET_S, TARGET_GIB = 30.0, 1.0
"""The target for a 2,000-teacher spec on the 2-core machine."""
STUDENTS = (
    "  - name: smollm2-135m\n    backend: embedded\n    dtype: float32\n"
    "    decoding: {max_new_tokens: 48, forcing_max_tokens: 16}\n",
    "  - name: gemma-3-270m\n    backend: embedded\n    model: gemma-3-270m\n    dtype: float32\n"
    "    decoding: {max_new_tokens: 24, forcing_max_tokens: 16}\n",
)


def write_spec(folder: Path, teachers: int, students: int = 1) -> Path:
    """The spec of `teachers` teachers (module docstring) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    records = TRACES.read_text(encoding="utf-8").splitlines()
    entries = []
    for i in range(teachers):
        first = 2 * i % len(records)
        (folder / f"t{i}.jsonl").write_text("\n".join(records[first : first + 2]) + "\n", encoding="utf-8")
        entries.append(f"  - name: teacher-{i:05d}\n    traces: [t{i}.jsonl]\n")
    spec = folder / "spec.yaml"
    spec.write_text(
        f"name: plan-scale-{teachers}\nstore: store.duckdb\nteachers:\n" + "".join(entries) + "datasets: [gsm8k]\n"
        "students:\n" + "".join(STUDENTS[:students]) + "transfer: {max_new_tokens: 48, limit: 2}\n"
        "judge: {name: lexical}\nquality: {enabled: true, metrics: [clarity, cohesion, z3]}\nreport: {out: report}\n"
        "execution: {local_cpus: 2, cpus_per_engine: 2, traces_per_chunk: 2}\n", encoding="utf-8")
    return spec


@dataclass(frozen=True, slots=True)
class Measured:
    teachers: int
    wall_s: float
    """The process, start to exit."""
    plan_s: float
    """The command's own `wall_s` (its summary)."""
    rss_mib: float
    shards: int
    rollouts: int


def measure(spec: Path, teachers: int) -> Measured:
    """`legival plan SPEC --db FRESH` in its own process: wall time, peak RSS and what it planned."""
    exe = Path(sys.executable).with_name("legival")
    db = spec.parent / "fresh.duckdb"  # never created: a plan only reads the store
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([str(exe), "plan", str(spec), "--db", str(db)], stdout=out, stderr=err,
                                cwd=spec.parent)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"legival plan failed ({proc.returncode}) at {teachers} teachers:\n"
                             f"{err.read().decode()[-3000:]}")
        summary = json.loads(out.read().decode().strip().splitlines()[-1])
    return Measured(teachers, wall, float(summary["wall_s"]), usage.ru_maxrss / 1024,
                    len(summary["plan"]["shards"]), int(summary["rollouts_missing"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,100,1000,2000", help="teacher counts, comma-separated (the first is the baseline)")
    ap.add_argument("--students", type=int, choices=(1, 2), default=1)
    ap.add_argument("--keep", type=Path, help="write the specs in this folder (kept) instead of a temporary one")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        root = args.keep or Path(tmp)
        specs = {n: write_spec(root / f"t{n}", n, args.students) for n in sizes}
        measure(specs[sizes[0]], sizes[0])  # warm-up: the page cache, compiled bytecode
        rows = [measure(specs[n], n) for n in sizes]
    base = rows[0]
    print(f"legival plan, a fresh store, {args.students} student(s); each size its own process "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'teachers':>9} {'shards':>7} {'rollouts':>9} {'wall s':>8} {'plan s':>8} {'peak RSS MiB':>13} "
          f"{'ms/teacher':>11} {'KiB/teacher':>12}")
    for r in rows:
        extra = r.teachers - base.teachers
        per_s = f"{(r.wall_s - base.wall_s) / extra * 1000:.1f}" if extra else "-"
        per_kib = f"{(r.rss_mib - base.rss_mib) / extra * 1024:.1f}" if extra else "-"
        print(f"{r.teachers:>9,} {r.shards:>7,} {r.rollouts:>9,} {r.wall_s:>8.1f} {r.plan_s:>8.1f} {r.rss_mib:>13.0f} "
              f"{per_s:>11} {per_kib:>12}")
    last = rows[-1]
    ok = last.wall_s < TARGET_S and last.rss_mib / 1024 < TARGET_GIB
    print(f"target ({last.teachers:,} teachers): under {TARGET_S:.0f} s and {TARGET_GIB:.0f} GiB: "
          f"{last.wall_s:.1f} s, {last.rss_mib / 1024:.2f} GiB: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
