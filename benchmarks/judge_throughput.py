"""Judge throughput against the local fake Gemini server: calls/s through the real google-genai client.

    .venv/bin/python benchmarks/judge_throughput.py [--n 1000] [--delay 0.05] [--concurrency 16]

The server sleeps `delay` seconds per request, so the ceiling is concurrency / delay calls/s
(320/s for the defaults); the gap to it is client-side overhead (SDK request building, pydantic
parsing, reply validation). The server runs in a separate process (so it does not share the
client's GIL) unless --same-process is given.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import fake_gemini  # noqa: E402

from legival_core.judges import GeminiJudge, JudgeLimits, JudgeRequest  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--same-process", action="store_true")
    args = ap.parse_args()
    steps = ("Let x = 1.", "Wait, x must be 2.", "So the answer is 2.")
    reqs = [JudgeRequest(f"t{i}", "math", "q", steps) for i in range(args.n)]
    with fake_gemini(args.delay, same_process=args.same_process) as url:
        judge = GeminiJudge(
            api_key="bench-key", base_url=url, limits=JudgeLimits(concurrency=args.concurrency)
        )
        t0 = time.perf_counter()
        res = judge.judge_many(reqs)
        dt = time.perf_counter() - t0
    ok = sum(r.status == "ok" for r in res)
    ceiling = args.concurrency / args.delay if args.delay else float("inf")
    print(
        f"{args.n} requests, delay {args.delay * 1000:.0f} ms, concurrency {args.concurrency}: "
        f"{dt:.2f} s, {args.n / dt:.1f} calls/s (ceiling {ceiling:.0f}/s), ok={ok}, "
        f"server {'in-process' if args.same_process else 'separate process'}"
    )


if __name__ == "__main__":
    main()
