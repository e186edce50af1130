"""Efficiency metrics on the 5 developer GSM8K trace files (2,294 traces), embeddings included.

Target (issue 14): under 60 s on an idle 2-core machine. Runs the efficiency stage twice on copies of
the same freshly ingested store, in this one process: first "today's path" (the stage as it was before
the embedding cache: sentence-transformers' own `encode` at batch 32, sentences sorted by characters,
no memory across chunks, no cache rows written, one `steps` insert per trace), then the stage as it is (the spec's backend and
precision, token-sorted batches, the embedding cache). Prints both times, the speed-up, sentences/s,
and how far the new path's per-trace redundancy is from today's (fp32: within 1e-4).

    .venv/bin/python benchmarks/efficiency.py [--shared ../shared/data] [--backend auto] [--precision fp32]
        [--no-baseline]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class _TodayEncode:
    """The embedding call of the stage before the cache: `SentenceTransformer.encode`, batch 32."""

    name = "torch-encode"

    def __init__(self, path: str) -> None:
        from legival_core.embed.runtimes import sentence_transformer

        self.st = sentence_transformer(path)

    def encode(self, sentences: Any) -> Any:
        import numpy as np

        out = self.st.encode(list(sentences), batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                             show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


def _segment_commit_per_trace(self: Any, store: Any, results: Any, plan: Any) -> int:
    """The segment stage's commit before this change: one `steps` insert per trace."""
    with store.transaction():
        for r in results:
            store.insert_rows("steps", r["steps"])
        store.insert_rows("step_counts", [r["count"] for r in results])
    plan.summary.segmented += len(results)
    return len(results)


@contextmanager
def _todays_path() -> Any:
    """Patch the differences away: the runtime, the cross-chunk memory, the cache writes and the
    segment stage's per-trace inserts."""
    import legival_core.embed as embed_mod
    import legival_core.embed.runtimes as rt
    import legival_core.stages.efficiency as eff

    saved = rt.load_runtime, embed_mod.MEMO_LIMIT, eff._embedding_rows, eff.SegmentStage.commit
    rt.load_runtime = lambda path, backend, precision: _TodayEncode(path)
    embed_mod.MEMO_LIMIT = 0
    eff._embedding_rows = lambda need, new, key: {}
    eff.SegmentStage.commit = _segment_commit_per_trace  # type: ignore[method-assign]
    embed_mod._load_runtime.cache_clear()  # loaded runtimes are shared per process: none across the switch
    try:
        yield
    finally:
        rt.load_runtime, embed_mod.MEMO_LIMIT, eff._embedding_rows, eff.SegmentStage.commit = saved  # type: ignore[method-assign]
        embed_mod._load_runtime.cache_clear()


def _run(db: Path, cfg: Any) -> tuple[float, float, Any, Any]:
    from legival_core.reports.compute.trace_table import trace_table
    from legival_core.stages.efficiency import compute_efficiency
    from legival_core.store import Store

    with Store(db) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        s = compute_efficiency(store, cfg)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        red = trace_table(store, cfg).select("trace_id", "redundancy")
    return seconds, cpu, s, red


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--no-baseline", action="store_true", help="skip today's path (the new one only)")
    args = ap.parse_args()
    files = sorted((args.shared / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    if not files:
        sys.exit(f"no trace files under {args.shared}/reasoning_traces/gsm8k")

    from legival_core.embed import Embedder, resolve_model_path
    from legival_core.run_config import Efficiency
    from legival_core.stages.ingest import ingest_file
    from legival_core.store import Store

    cfg = Efficiency(embed_backend=args.backend, embed_precision=args.precision)
    today_cfg = Efficiency(embed_backend="torch")
    # Model loads (and the one-off export of a converted graph) are timed apart from the metric throughput.
    t0 = time.perf_counter()
    runtime = Embedder(cfg.model, cfg.embed_backend, cfg.embed_precision).runtime()
    runtime.encode(["warm-up"])
    t_load = time.perf_counter() - t0
    _TodayEncode(resolve_model_path(cfg.model)).encode(["warm-up"])
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "ingested.duckdb"
        with Store(base) as store:
            t0 = time.perf_counter()
            n = sum(ingest_file(store, f).new_traces for f in files)
            t_ingest = time.perf_counter() - t0
        shutil.copy(base, Path(d) / "today.duckdb")
        shutil.copy(base, Path(d) / "new.duckdb")
        today = None
        if not args.no_baseline:
            with _todays_path():
                today = _run(Path(d) / "today.duckdb", today_cfg)
        t_new, c_new, s, red = _run(Path(d) / "new.duckdb", cfg)

    print(f"traces: {n} from {len(files)} files; ingest+grade {t_ingest:.1f} s; "
          f"{runtime.name} {cfg.embed_precision} model load/export {t_load:.1f} s (not counted)")
    rate = s.embedded_sentences / s.embed_seconds if s.embed_seconds else float("nan")
    print(f"new path ({runtime.name}, {cfg.embed_precision}, cache): {t_new:.1f} s, {c_new:.1f} CPU s  "
          f"({n / t_new:.0f} traces/s; "
          f"{s.embedded_sentences} sentences, {s.encoded_sentences} distinct encoded, {s.cached_sentences} from "
          f"cache/memory; embedding {s.embed_seconds:.1f} s = {rate:.0f} sentences/s)")
    if today is not None:
        t_today, c_today, s0, red0 = today
        rate0 = s0.embedded_sentences / s0.embed_seconds if s0.embed_seconds else float("nan")
        print(f"today's path (sentence-transformers encode, batch 32): {t_today:.1f} s, {c_today:.1f} CPU s  "
              f"(embedding {s0.embed_seconds:.1f} s = {rate0:.0f} sentences/s)")
        print(f"speed-up: {t_today / t_new:.2f}x (stage), {s0.embed_seconds / s.embed_seconds:.2f}x (embedding), "
              f"{c_today / c_new:.2f}x (CPU seconds: the figure least moved by other load on the machine)")
        j = red0.join(red, on="trace_id", suffix="_new").drop_nulls()
        diff = (j["redundancy"] - j["redundancy_new"]).abs()
        print(f"redundancy vs today's path, per trace: max |diff| {diff.max():.2e}, "
              f"{int((diff > 1e-4).sum())} of {j.height} traces differ by more than 1e-4; mean "
              f"{j['redundancy'].mean():.4f} -> {j['redundancy_new'].mean():.4f}")
    load = os.getloadavg()[0]
    print(f"target: efficiency stage < 60 s -> {'PASS' if t_new < 60 else 'FAIL'} "
          f"(1-minute load at the end {load:.2f}; this run's own threads count in it)")


if __name__ == "__main__":
    main()
