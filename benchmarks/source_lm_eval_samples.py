"""Ingest speed of lm-evaluation-harness samples files (`--from lm-eval`) against our own JSONL reader, on
the same traces, measured in the same run; and the peak RSS of reading a large samples file.

    .venv/bin/python benchmarks/source_lm_eval_samples.py [--docs 20000] [--rss-docs 200000]
        [--ingest-docs 2000] [--samples SAMPLES_FILE]

The input is real lm-eval output: `--samples` (a `samples_<task>_<date>.jsonl` of a gsm8k-like task, its
results JSON beside it) or, by default, a fresh run of the real CLI (the test module's `run_lm_eval`:
SmolLM2, three GSM8K problems, ~25 s). Its lines are repeated, doc_id renumbered, to `--docs` docs in
lm-eval's own layout (every doc once per filter, filter after filter), and the same traces are written
as Legi-Val JSONL (problem, gold, the raw output as `response`). Measured:

- reader: records/s of `read_source` + `parse_record` (what `legival ingest` does before grading), best
  of 5 alternating passes, for both files, and the ratio (lm-eval / ours: above 1 is slower);
- peak RSS of that reading in a fresh process, on a `--rss-docs` file (hundreds of MB), against the same
  process reading a 1-doc file: what the reader holds grows with the file only if it loads it whole;
- `legival ingest` end to end (grading and the store write included), on `--ingest-docs` docs.
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

_READ = """
import json, resource, sys, time
from pathlib import Path
from legival_core.registry import discover
from legival_core.readers.sources import read_source
from legival_core.readers.trace_records import parse_record
discover()
path, fmt = Path(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
n = 0
_, unit, recs = read_source(path, fmt)
for line, rec in recs:
    parse_record(rec, str(path), line, None, unit)
    n += 1
print(json.dumps({"records": n, "s": time.perf_counter() - t0,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build(src: Path, docs: int, to: Path) -> tuple[Path, Path]:
    """`docs` docs in lm-eval's layout (beside a copy of the results JSON) and the same traces as our JSONL."""
    lines = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines()]
    results = json.loads(next(src.parent.glob(f"results_{src.name.rsplit('_', 1)[1][:-6]}.json")).read_text())
    filters = list(dict.fromkeys(s["filter"] for s in lines))
    by_filter = {f: [s for s in lines if s["filter"] == f] for f in filters}
    to.mkdir(parents=True, exist_ok=True)
    for res in src.parent.glob("results_*.json"):
        (to / res.name).write_bytes(res.read_bytes())
    task = src.name[len("samples_"):src.name.rfind("_")]
    samples, ours = to / src.name, to / f"ours-{docs}.jsonl"
    with samples.open("w", encoding="utf-8") as f:
        for flt in filters:
            real = by_filter[flt]
            for i in range(docs):
                f.write(json.dumps({**real[i % len(real)], "doc_id": i}, ensure_ascii=False) + "\n")
    with ours.open("w", encoding="utf-8") as f:
        first = by_filter[filters[0]]
        for i in range(docs):
            s = first[i % len(first)]
            f.write(json.dumps({"model": results["model_name"], "dataset": "gsm8k", "problem_id": f"{task}-{i}",
                                "problem": s["doc"]["question"],
                                "gold_answer": s["doc"]["answer"].split("####")[-1].strip(),
                                "response": s["resps"][0][0]}, ensure_ascii=False) + "\n")
    return samples, ours


def read_in_child(path: Path, fmt: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", _READ, str(path), fmt], capture_output=True, text=True, env=env,
                       cwd=REPO, check=True)
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def reader_pass(path: Path, fmt: str) -> tuple[int, float]:
    from legival_core.readers.sources import read_source
    from legival_core.readers.trace_records import parse_record

    t0 = time.perf_counter()
    n = 0
    _, unit, recs = read_source(path, fmt)
    for line, rec in recs:
        assert not isinstance(rec, Exception), rec
        parse_record(rec, str(path), line, None, unit)
        n += 1
    return n, time.perf_counter() - t0


def reader_rates(a: Path, b: Path, repeats: int = 5) -> tuple[tuple[int, float], tuple[int, float]]:
    """Best of `repeats` passes over each file, the passes alternating (the machine's load drifts)."""
    best_a, best_b = (0, float("inf")), (0, float("inf"))
    for _ in range(repeats):
        best_a = min(best_a, reader_pass(a, "lm-eval"), key=lambda x: x[1])
        best_b = min(best_b, reader_pass(b, "legival"), key=lambda x: x[1])
    return best_a, best_b


def ingest_s(path: Path, db: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "legival", "ingest", str(path), "--db", str(db)], env=env, cwd=REPO,
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--rss-docs", type=int, default=200000)
    ap.add_argument("--ingest-docs", type=int, default=2000)
    ap.add_argument("--samples", type=Path, default=None)
    args = ap.parse_args()
    from legival_core.registry import discover

    discover()
    with tempfile.TemporaryDirectory(prefix="bench-lm-eval-") as tmp:
        work = Path(tmp)
        src = args.samples
        if src is None:
            from tests.cli.test_source_lm_eval_samples import run_lm_eval

            src = run_lm_eval(work / "run", tasks=("gsm8k_local",))["gsm8k_local"]
        out: dict[str, Any] = {"benchmark": "source_lm_eval_samples", "docs": args.docs}
        samples, ours = build(src, args.docs, work / "speed")
        out["bytes"] = {"lm-eval": samples.stat().st_size, "legival": ours.stat().st_size}
        (n_lm, s_lm), (n_own, s_own) = reader_rates(samples, ours)
        assert n_lm == n_own == args.docs, (n_lm, n_own)
        out["reader_records_per_s"] = {"lm-eval": round(n_lm / s_lm), "legival": round(n_own / s_own)}
        out["reader_ratio"] = round(s_lm / s_own, 2)
        out["reader_mb_per_s_lm_eval"] = round(samples.stat().st_size / 1e6 / s_lm, 1)

        small, _ = build(src, 1, work / "rss-small")
        big, big_ours = build(src, args.rss_docs, work / "rss-big")
        base = read_in_child(small, "lm-eval")
        big_lm, big_own = read_in_child(big, "lm-eval"), read_in_child(big_ours, "legival")
        out["rss"] = {"file_mb": round(big.stat().st_size / 1e6), "records": big_lm["records"],
                      "peak_rss_mib_1_doc": round(base["peak_rss_mib"]),
                      "peak_rss_mib_lm_eval": round(big_lm["peak_rss_mib"]),
                      "peak_rss_mib_own_jsonl": round(big_own["peak_rss_mib"]),
                      "s_lm_eval": round(big_lm["s"], 1), "s_own_jsonl": round(big_own["s"], 1)}
        for p in (big, big_ours):
            p.unlink()

        few, few_ours = build(src, args.ingest_docs, work / "ingest")
        s_lm_ingest, s_own_ingest = ingest_s(few, work / "a.duckdb"), ingest_s(few_ours, work / "b.duckdb")
        out["ingest_s"] = {"lm-eval": round(s_lm_ingest, 2), "legival": round(s_own_ingest, 2),
                           "docs": args.ingest_docs, "ratio": round(s_lm_ingest / s_own_ingest, 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
