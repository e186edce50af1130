"""Ingest speed of the Hugging Face (`--from hf`) and OpenAI batch (`--from openai`) trace sources, as a
ratio against Legi-Val's own JSONL reader on the same traces, measured in the same run; and each
reader's peak RSS at two sizes (a reader that streams stays flat as the file grows).

The traces: the 200 real GSM8K traces of examples/data/gsm8k_gpt-oss-120b_200.jsonl, repeated under
teacher names `<model>#k` up to N, written as (1) our own JSONL, (2) a `datasets` Dataset through
`Dataset.from_list(...).save_to_disk` (the `datasets` library: `hf` extra), (3) the same through
`to_parquet` (read with `--from hf`), (4) an OpenAI Batch API output file, each line
`{"id", "custom_id", "response": {"status_code": 200, "request_id", "body": <chat.completion with
message.reasoning_content>}, "error": null}` (the shape tests/cli/test_source_openai.py obtains from real
HTTP responses; written directly here: a benchmark of reading needs size, not a server), custom_id =
problem id, with GSM8K's test.jsonl as --problems.

Two measurements per input, each in a fresh process (peak RSS is the process's VmHWM), the fastest of
`--repeat` runs shown (the machine's other load makes single runs vary by tens of percent):
- read: `read_source` + `parse_record` on every record (what differs between sources: the plan's
  reading and validation), the source's library imported before the clock starts (its import time is
  printed apart);
- ingest: `ingest_file` into a new store (reading, grading with our graders, one transaction), the
  command's real work; grading dominates it, so its ratios are near 1.

    .venv/bin/python benchmarks/source_hf_openai.py [--sizes 5000,20000] [--no-ingest] [--repeat 2]
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
sys.path.insert(0, str(REPO / "benchmarks"))

from _measure import peak_rss_mib  # noqa: E402

EXAMPLES = REPO / "examples" / "data"

INPUTS: dict[str, tuple[str, dict[str, str]]] = {
    "legival": ("legival", {}),
    "hf (save_to_disk)": ("hf", {}),
    "hf (parquet)": ("hf", {}),
    "openai (batch)": ("openai", {"dataset": "gsm8k", "problems": "test.jsonl"}),
}
FILES = {"legival": "own.jsonl", "hf (save_to_disk)": "saved", "hf (parquet)": "rows.parquet",
         "openai (batch)": "batch_out.jsonl"}


def make(d: Path, n: int) -> None:
    """The four inputs of `n` traces in `d` (module docstring)."""
    import datasets

    datasets.disable_progress_bars()
    base = [json.loads(x) for x in (EXAMPLES / "gsm8k_gpt-oss-120b_200.jsonl").read_text().splitlines()]
    keep = ("model", "dataset", "problem_id", "problem", "gold_answer", "reasoning", "response", "truncated")
    recs = [{k: t[k] for k in keep} | {"model": f"{t['model']}#{i // len(base)}"}
            for i, t in zip(range(n), base * (n // len(base) + 1), strict=False)]
    with (d / "own.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    ds = datasets.Dataset.from_list(recs)
    ds.save_to_disk(str(d / "saved"))
    ds.to_parquet(str(d / "rows.parquet"))
    (d / "test.jsonl").write_bytes((EXAMPLES / "gsm8k_test.jsonl").read_bytes())
    with (d / "batch_out.jsonl").open("w") as f:
        for i, r in enumerate(recs):
            body = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 0, "model": r["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant", "content": r["response"], "reasoning_content": r["reasoning"]}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 200, "total_tokens": 300}}
            f.write(json.dumps({"id": f"batch_req_{i}", "custom_id": r["problem_id"], "error": None,
                                "response": {"status_code": 200, "request_id": f"req_{i}", "body": body}}) + "\n")


def child(mode: str, name: str, d: Path) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    from legival_core.readers.sources import SourceOptions, read_source
    from legival_core.readers.trace_records import parse_record

    fmt, extra = INPUTS[name]
    t0 = time.perf_counter()
    if fmt == "hf":
        import datasets  # noqa: F401  (its import apart from the reading)
    import_s = time.perf_counter() - t0
    opts = SourceOptions(dataset=extra.get("dataset"), problems=d / extra["problems"] if "problems" in extra else None)
    path = d / FILES[name]
    t0 = time.perf_counter()
    if mode == "read":
        _fmt, unit, records = read_source(path, fmt, opts)
        n = 0
        for n, (line, rec) in enumerate(records, start=1):  # noqa: B007  (n: how many were read)
            assert not isinstance(rec, Exception), rec
            parse_record(rec, str(path), line, None, unit)
    else:
        from legival_core.stages.ingest import ingest_file
        from legival_core.store import Store

        with Store(d / f"{name.split()[0]}-{os.getpid()}.duckdb") as store:
            n = ingest_file(store, path, fmt=fmt, options=opts).new_traces
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": n, "import_s": import_s, "peak_rss_mb": peak_rss_mib()}


def measure(mode: str, name: str, d: Path) -> dict[str, Any]:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", mode, name, str(d)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} {name} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,20000", help="numbers of traces (the peak RSS at each)")
    ap.add_argument("--no-ingest", action="store_true", help="the reading only (no grading, no store)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each measurement (the fastest is shown)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, name, d = args.child
        print(json.dumps(child(mode, name, Path(d))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = ["read"] if args.no_ingest else ["read", "ingest"]
    report: dict[str, Any] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            make(d, n)
            sizes_mb = {name: _size(d / f) / 2**20 for name, f in FILES.items()}
            for mode in modes if n == sizes[-1] else ["read"]:
                rows: dict[str, dict[str, Any]] = {}
                for _ in range(args.repeat):  # round robin: a slow spell of the machine hits every input
                    for name in INPUTS:
                        r = measure(mode, name, d)
                        if name not in rows or r["seconds"] < rows[name]["seconds"]:
                            rows[name] = r
                base = rows["legival"]["seconds"]
                print(f"\n{mode}, {n:,} traces")
                print(f"{'input':20} {'MB':>7} {'s':>7} {'traces/s':>9} {'x own':>6} {'import s':>8} {'peak RSS MB':>11}")
                for name, r in rows.items():
                    assert r["records"] == n, (name, r)
                    print(f"{name:20} {sizes_mb[name]:7.1f} {r['seconds']:7.2f} {n / r['seconds']:9.0f} "
                          f"{r['seconds'] / base:6.2f} {r['import_s']:8.2f} {r['peak_rss_mb']:11.0f}")
                report[f"{mode}@{n}"] = rows
    print(json.dumps(report))


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


if __name__ == "__main__":
    main()
