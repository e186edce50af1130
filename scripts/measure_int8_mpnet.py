"""int8 against fp32 all-mpnet-base-v2 on ONNX Runtime: speed and agreement (docs/quality.md, cohesion).

Distinct sentences of every 25th GSM8K developer trace (../shared/data/reasoning_traces/gsm8k), both
precisions in the same run: sentences/s, the cosine between a sentence's two vectors, and the change
in consecutive-sentence cosines (what cohesion averages).

    .venv/bin/python scripts/measure_int8_mpnet.py [--shared ../shared/data] [--sentences 1500]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from legival_core.embed import Embedder
from legival_core.segment import sentence_spans


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--sentences", type=int, default=1500)
    args = ap.parse_args()
    sents: list[str] = []
    for f in sorted((args.shared / "reasoning_traces" / "gsm8k").glob("*.jsonl")):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines()):
            if i % 25:
                continue
            r = json.loads(line)
            text = r.get("reasoning") or r.get("reasoning_content") or ""
            sents += [text[s.start:s.end] for s in sentence_spans(text)]
    sents = list(dict.fromkeys(s for s in sents if s.strip()))[: args.sentences]
    vectors = {}
    for precision in ("fp32", "int8"):
        e = Embedder("all-mpnet-base-v2", "onnx", precision)
        e.embed(sents[:50])  # load (and export, the first time) outside the timing
        t0 = time.perf_counter()
        vectors[precision] = e.embed(sents[50:]).vectors
        dt = time.perf_counter() - t0
        print(f"{precision}: {len(sents) - 50} sentences in {dt:.1f}s, {(len(sents) - 50) / dt:.1f} sentences/s")
    a, b = vectors["fp32"], vectors["int8"]
    self_cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    ca, cb = (a[1:] * a[:-1]).sum(1), (b[1:] * b[:-1]).sum(1)
    print(f"cos(int8, fp32) per sentence: min {self_cos.min():.3f}, mean {self_cos.mean():.3f}")
    print(f"consecutive cosines |int8 - fp32|: mean {np.abs(ca - cb).mean():.3f}, max {np.abs(ca - cb).max():.3f}")


if __name__ == "__main__":
    main()
