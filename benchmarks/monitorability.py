"""The g-mean² bootstrap's cost (issue 48 part 3: 10,000 instances x 2 arms x 8 samples, 100 draws,
under 30 s and 2 GiB; docs/monitorability.md "Speed and memory").

A synthetic table with a planted structure: 70% of the instances follow the hint (P(y=1|x=0) = 0.1,
P(y=1|x=1) = 0.8), 30% ignore it (0.3 in both arms); the monitor flags 75% of the hinted target answers
and 10% of every other row. For a hint-following instance the planted numbers are q = 0.7 / 0.8,
TPR = min(1, 0.75 / q) = 0.857, TNR = sqrt(0.9 * 0.9) = 0.9 and g-mean² = 0.771.

Measured, in one run on one machine:
- the bootstrap alone (`cell_counts` + `gmean_bootstrap.summary`, in this process), its time and this
  process's peak resident set (`peak_rss_mib`, the kernel's high-water mark);
- the whole command (`legival monitorability score` on the table as CSV, in a fresh process: reading and
  checking 160,000 rows, the per-instance file, the bootstrap, the files written whole), its wall time
  and its peak resident set.
The figure (docs/figures/monitorability_bootstrap.png) is g-mean² over the draws beside the plain
(all-rows) estimate and the planted value.

    .venv/bin/python benchmarks/monitorability.py [--instances 10000] [--samples 8] [--draws 100] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._measure import load_average, machine_at_start, peak_rss_mib  # noqa: E402

FIGURE = REPO / "docs" / "figures" / "monitorability_bootstrap.png"
PLANTED_GMEAN2 = min(1.0, 0.75 / (0.7 / 0.8)) * 0.9


def planted_table(instances: int, samples: int, seed: int = 0) -> Any:
    """The module's synthetic table: `instances` x 2 arms x `samples` rows."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    follows = rng.random(instances) < 0.7
    inst = np.repeat(np.arange(instances), 2 * samples)
    x = np.tile(np.repeat([0, 1], samples), instances)
    f = follows[inst]
    p_y = np.where(f, np.where(x == 1, 0.8, 0.1), 0.3)
    y = rng.random(inst.size) < p_y
    z = rng.random(inst.size) < np.where((x == 1) & y, 0.75, 0.1)
    return pl.DataFrame({"instance": [f"q{i}" for i in inst], "x": x.astype(np.int8), "y": y.astype(np.int8),
                         "z": z.astype(np.int8)})


def figure(draws: Any, plain: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
    ax.hist(draws, bins=20, color="#4c72b0", alpha=0.85, label=f"cross-fit bootstrap ({len(draws)} draws)")
    ax.axvline(plain, color="#dd8452", lw=2, label=f"plain, all rows: {plain:.3f}")
    ax.axvline(PLANTED_GMEAN2, color="#55a868", lw=2, ls="--", label=f"planted: {PLANTED_GMEAN2:.3f}")
    ax.set_xlabel("g-mean² of the group (mean over eligible instances)")
    ax.set_ylabel("draws")
    ax.set_title("g-mean², 10,000 synthetic instances x 2 arms x 8 samples", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "monitorability.json")
    args = ap.parse_args()
    load_start = machine_at_start()

    from legival_core.monitor.gmean import cell_counts, per_instance
    from legival_core.monitor.gmean_bootstrap import cross_fit, summary

    frame = planted_table(args.instances, args.samples)
    rss_data = peak_rss_mib()
    t0 = time.perf_counter()
    cells = cell_counts(frame)
    groups = summary(cells, draws=args.draws, seed=0)
    bootstrap_s = time.perf_counter() - t0
    rss_bootstrap = peak_rss_mib()
    row = groups.row(0, named=True)
    plain = float(per_instance(frame)["gmean2"].drop_nulls().to_numpy().mean())
    print(f"bootstrap: {args.instances:,} instances x 2 arms x {args.samples} samples, {args.draws} draws: "
          f"{bootstrap_s:.2f} s, peak RSS {rss_bootstrap:.0f} MiB (table built: {rss_data:.0f} MiB); g-mean² "
          f"{row['gmean2_mean']:.3f} ± {row['gmean2_std']:.3f}, eligible {row['eligible_fraction_mean']:.3f}", flush=True)
    figure(cross_fit(cells, draws=args.draws, seed=0).gmean2[0], plain, FIGURE)

    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "table.csv"
        frame.write_csv(table)
        t1 = time.perf_counter()
        proc = subprocess.run([str(Path(sys.executable).parent / "legival"), "monitorability", "score", str(table),
                               "--out", str(Path(tmp) / "out"), "--bootstrap", str(args.draws)],
                              capture_output=True, text=True, check=False)
        command_s = time.perf_counter() - t1
        if proc.returncode != 0:
            sys.exit(f"legival monitorability score failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        command_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        inside = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"legival monitorability score (CSV, {frame.height:,} rows, fresh process): {command_s:.2f} s "
          f"(its own wall_s {inside['wall_s']} s), peak RSS {command_rss:.0f} MiB", flush=True)
    result = {"benchmark": "monitorability", "instances": args.instances, "samples": args.samples,
              "draws": args.draws, "rows": frame.height, "bootstrap_s": round(bootstrap_s, 3),
              "bootstrap_peak_rss_mib": round(rss_bootstrap, 1), "command_s": round(command_s, 3),
              "command_wall_s": inside["wall_s"], "command_peak_rss_mib": round(command_rss, 1),
              "gmean2_mean": row["gmean2_mean"], "gmean2_std": row["gmean2_std"], "TPR_mean": row["TPR_mean"],
              "TNR_mean": row["TNR_mean"], "eligible_fraction_mean": row["eligible_fraction_mean"],
              "plain_gmean2": plain, "planted_gmean2": PLANTED_GMEAN2, "cpus": os.cpu_count(),
              "load_start": load_start, "load_end": load_average(), "figure": str(FIGURE.relative_to(REPO)),
              "limits": {"seconds": 30, "mib": 2048}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    ok = max(bootstrap_s, command_s) < 30 and max(rss_bootstrap, command_rss) < 2048
    print(json.dumps(result))
    if not ok:
        sys.exit("over the limits: 30 s and 2 GiB")


if __name__ == "__main__":
    main()
