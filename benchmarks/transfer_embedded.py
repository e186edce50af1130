"""Prefix-cache benchmark for the embedded student on transfer-utility rollouts (SPEC section 4).

For real GSM8K traces with at least 30 sentence steps, builds the rollout prompts at depths
K = {0, s, 2s, ... < m} u {m}, runs them (a) naively, each from scratch, one at a time, and (b)
through `EmbeddedBackend.generate` (one group per trace, shared-prefix KV reuse, batched decode),
asserts identical completions and prints throughput and token accounting.

    PYTHONPATH=. .venv/bin/python benchmarks/transfer_prefix_cache.py --limit 2 --threads 1
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from dataclasses import dataclass
from pathlib import Path

from legival_core.backends.base import ChatMessage, Completion, GenerationRequest
from legival_core.backends.embedded import EmbeddedBackend

TRACES = "/work/shared/data/reasoning_traces/gsm8k/*.jsonl"
NLTK_DATA = "/work/shared/data/nltk_data"
SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."


class FirstBoxed:
    """True once the continuation holds a complete `\\boxed{...}` (braces balanced)."""

    def __call__(self, text: str) -> bool:
        start = text.find("\\boxed{")
        if start < 0:
            return False
        depth = 0
        for ch in text[start + len("\\boxed") :]:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return True
        return False


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    question: str
    prefixes: tuple[str, ...]  # assistant prefix per rollout depth k in K


def depths(m: int, step: int) -> list[int]:
    return sorted({*range(0, m, step), m})


def load_traces(limit: int, min_steps: int, step: int) -> list[Trace]:
    import nltk

    nltk.data.path.append(NLTK_DATA)
    from nltk.tokenize import PunktTokenizer

    punkt = PunktTokenizer("english")
    traces: list[Trace] = []
    for path in sorted(glob.glob(TRACES)):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            text = rec.get("reasoning") or ""
            if rec.get("correct") is not True or not text:
                continue
            ends = [end for _, end in punkt.span_tokenize(text)]
            if len(ends) < min_steps:
                continue
            cut = [0, *ends]
            prefixes = tuple(text[: cut[k]] for k in depths(len(ends), step))
            traces.append(Trace(f"{rec['model']}/{rec['problem_id']}", rec["problem"], prefixes))
            if len(traces) >= limit:
                return traces
    return traces


def build_requests(
    backend: EmbeddedBackend, traces: list[Trace], max_new_tokens: int
) -> list[GenerationRequest]:
    rule = FirstBoxed()
    requests = []
    for trace in traces:
        for i, prefix in enumerate(trace.prefixes):
            messages = [
                ChatMessage("system", SYSTEM),
                ChatMessage("user", trace.question),
                ChatMessage("assistant", prefix),
            ]
            prompt = backend.render_chat(messages, continue_final_message=True)
            requests.append(
                GenerationRequest(f"{trace.trace_id}#{i}", prompt, max_new_tokens, trace.trace_id, rule)
            )
    return requests


def summarize(name: str, done: list[Completion], seconds: float, max_new_tokens: int) -> None:
    requested = sum(c.prompt_tokens for c in done)
    computed = sum(c.prefill_computed for c in done)
    decoded = sum(c.completion_tokens for c in done)
    saved = sum(max_new_tokens - c.completion_tokens for c in done if c.finish_reason == "rule")
    reasons = {r: sum(c.finish_reason == r for c in done) for r in ("rule", "stop", "length", "overflow")}
    print(
        f"{name:>6}: {len(done)} rollouts in {seconds:.1f} s = {len(done) / seconds:.3f} rollouts/s | "
        f"prefill computed/requested {computed}/{requested} = {computed / max(requested, 1):.3f} | "
        f"decode tokens {decoded} ({decoded / seconds:.1f} tok/s) | saved by stop rule {saved} | {reasons}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=10, help="number of traces (default 10)")
    parser.add_argument("--min-steps", type=int, default=30)
    parser.add_argument("--step-interval", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--model-dir", type=Path, default=None)
    args = parser.parse_args()

    started = time.perf_counter()
    backend = EmbeddedBackend(
        args.model_dir, dtype=args.dtype, max_batch=args.max_batch, num_threads=args.threads
    )
    print(f"model {backend.model_id} ({args.dtype}) ready in {time.perf_counter() - started:.1f} s")
    traces = load_traces(args.limit, args.min_steps, args.step_interval)
    requests = build_requests(backend, traces, args.max_new_tokens)
    print(f"{len(traces)} traces, {len(requests)} rollouts, max_new_tokens {args.max_new_tokens}")

    t0 = time.perf_counter()
    cached = backend.generate(requests)
    cached_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = backend.generate_naive(requests)
    naive_s = time.perf_counter() - t0

    mismatches = [
        (a.request_id, a.text, b.text) for a, b in zip(cached, naive, strict=True) if a.text != b.text
    ]
    for rid, a_text, b_text in mismatches[:5]:
        print(f"MISMATCH {rid}\n  cached: {a_text!r}\n  naive:  {b_text!r}")
    summarize("naive", naive, naive_s, args.max_new_tokens)
    summarize("cached", cached, cached_s, args.max_new_tokens)
    print(f"wall-time ratio cached/naive = {cached_s / naive_s:.3f} (target <= 0.5)")
    assert not mismatches, f"{len(mismatches)} of {len(requests)} completions differ"
    assert all(
        (a.finish_reason, a.completion_tokens) == (b.finish_reason, b.completion_tokens)
        for a, b in zip(cached, naive, strict=True)
    )
    print("completions identical")
    backend.close()


if __name__ == "__main__":
    main()
