"""Efficiency metrics on the 5 developer GSM8K trace files (~2,300 traces), embeddings included.

Target (foundation issue): under 2 minutes on a 2-core machine. Prints traces/s and sentences/s, and,
as the baseline measured in the same run, per-trace (unbatched) embedding on a sample, with the ratio.

    .venv/bin/python benchmarks/efficiency.py [--shared ../shared/data] [--baseline-sample 150]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _reasonings(path: Path) -> list[str]:
    """The reasoning texts of a trace file, in file order (the baseline's input; no store needed)."""
    import json

    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append(str(rec.get("reasoning") or ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--baseline-sample", type=int, default=150)
    args = ap.parse_args()
    files = sorted((args.shared / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    if not files:
        sys.exit(f"no trace files under {args.shared}/reasoning_traces/gsm8k")

    from legival_core.embed import embed
    from legival_core.segment import segment
    from legival_core.spec import Efficiency
    from legival_core.stages.efficiency import compute_efficiency
    from legival_core.stages.ingest import ingest_file
    from legival_core.store import Store

    cfg = Efficiency()
    embed(["warm-up"], cfg.model)  # model load is reported separately from the metric throughput
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "bench.duckdb")
        t0 = time.perf_counter()
        n = sum(ingest_file(store, f).new_traces for f in files)
        t_ingest = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = compute_efficiency(store, cfg)
        t_eff = time.perf_counter() - t0
        texts = [t for f in files for t in _reasonings(f)][: args.baseline_sample]
        store.close()

    t0 = time.perf_counter()
    sent_b = 0
    for text in texts:  # baseline: one embed call per trace, as a naive implementation would do
        sents = segment(text).sentences()
        sent_b += len(sents)
        embed(sents, cfg.model)
    t_base = time.perf_counter() - t0

    batched_rate = s.embedded_sentences / s.embed_seconds if s.embed_seconds else float("nan")
    base_rate = sent_b / t_base if t_base else float("nan")
    print(f"traces: {n} from {len(files)} files; ingest+grade {t_ingest:.1f} s")
    print(f"efficiency stage: {t_eff:.1f} s  ({n / t_eff:.0f} traces/s, {s.embedded_sentences} sentences embedded, "
          f"{s.embedded_sentences / t_eff:.0f} sentences/s overall)")
    print(f"embedding only: batched across traces {batched_rate:.0f} sentences/s; "
          f"per-trace baseline ({len(texts)} traces) {base_rate:.0f} sentences/s; ratio {batched_rate / base_rate:.2f}x")
    print(f"target: efficiency stage < 120 s -> {'PASS' if t_eff < 120 else 'FAIL'}")


if __name__ == "__main__":
    main()
