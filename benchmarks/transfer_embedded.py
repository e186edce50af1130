"""Prefix-cache benchmark for the embedded student on transfer-utility rollouts (SPEC section 4).

For real GSM8K traces with at least 30 steps, builds the real rollout requests (benchmarks/
_transfer_workload.py: planner depths and prefixes, dataset prompt, first-answer stop), runs them
(a) naively, each from scratch, one at a time, and (b) through `EmbeddedBackend.generate` (one group
per trace, shared-prefix KV reuse, batched decode), asserts identical completions and prints
throughput and token accounting. Run it on an otherwise idle machine: on 2 cores any other load
skews both sides differently.

    .venv/bin/python benchmarks/transfer.py --backend embedded --limit 10
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from legival_core.backends.embedded import EmbeddedBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _transfer_workload import token_summary, workload, workload_parser  # noqa: E402


def main() -> None:
    parser = workload_parser(__doc__)
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
    requests = workload(backend, args)

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
    print(f" naive: {token_summary(naive, naive_s, args.max_new_tokens)}")
    print(f"cached: {token_summary(cached, cached_s, args.max_new_tokens)}")
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
