"""The judge STAGE end to end (store -> requests -> google-genai -> fake Gemini -> store), then a rerun.

    .venv/bin/python benchmarks/judge_stage.py [--n 1000] [--delay 0.05] [--concurrency 16]

A temp store gets the 80 bundled traces repeated under distinct ids up to `--n`; their steps are
segmented first (timed apart). The fake server (separate process, so it does not share our GIL)
sleeps `delay` per request, so the ceiling is concurrency / delay calls/s. Issue 5's target: 1,000
traces at 50 ms and concurrency 16 in under 10 s of wall time, and 0 calls on the rerun.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _measure import fake_gemini  # noqa: E402

from legival_core.judges import GeminiJudge, JudgeLimits  # noqa: E402
from legival_core.stages.efficiency import ensure_steps  # noqa: E402
from legival_core.stages.ingest import ingest_file  # noqa: E402
from legival_core.stages.judge import judge_missing  # noqa: E402
from legival_core.store import Store  # noqa: E402


def fill(store: Store, n: int, tmp: Path) -> None:
    """The bundled traces, copied under distinct problem ids (hence trace ids) until there are `n`."""
    src = ROOT / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
    records = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    path = tmp / "traces.jsonl"
    with path.open("w") as f:
        for i in range(n):
            rec, copy = dict(records[i % len(records)]), i // len(records)
            if copy:
                rec["problem_id"] = f"{rec['problem_id']}-copy{copy}"
            f.write(json.dumps(rec) + "\n")
    ingest_file(store, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    with (fake_gemini(args.delay) as url, tempfile.TemporaryDirectory() as tmp,
          Store(Path(tmp) / "bench.duckdb") as store):
        fill(store, args.n, Path(tmp))
        t0 = time.perf_counter()
        segmented = ensure_steps(store)
        seg_s = time.perf_counter() - t0
        judge = GeminiJudge(
            api_key="bench-key", base_url=url, limits=JudgeLimits(concurrency=args.concurrency)
        )
        t0 = time.perf_counter()
        s = judge_missing(store, judge)
        dt = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = judge_missing(store, judge)
        dt2 = time.perf_counter() - t0
        stored = store.count("judge_results")
    ceiling = args.concurrency / args.delay if args.delay else float("inf")
    print(f"segmented {segmented} traces in {seg_s:.2f} s (once, before judging)")
    print(
        f"judged {s.judge_calls} traces (ok={s.ok}, failed={s.failed}), delay {args.delay * 1000:.0f} ms, "
        f"concurrency {args.concurrency}: {dt:.2f} s wall, {s.judge_calls / dt:.1f} calls/s "
        f"(ceiling {ceiling:.0f}/s); {stored} rows stored"
    )
    print(f"rerun: {again.judge_calls} calls, {again.cached} cached, {dt2:.2f} s")
    if s.judge_calls != args.n or again.judge_calls != 0 or dt >= 10.0:
        raise SystemExit("target missed: every trace judged once in < 10 s and 0 calls on the rerun")


if __name__ == "__main__":
    main()
