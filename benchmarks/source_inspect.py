"""Ingest speed of Inspect AI eval logs (`--from inspect`) as a ratio against our own JSONL reader on the
same traces, and the peak memory of a 100,000-sample log (issue 40). Not a timed test: run it by hand.

The logs are Inspect's own, made under --dir (default /tmp/legival-inspect-bench, reused when there):
1. `template.eval`: a real Inspect run of the 1,319 GSM8K test problems (examples/data/gsm8k_test.jsonl)
   against Inspect's offline `mockllm/model`, whose outputs hold the GSM8K solution as reasoning content
   blocks (or as `<think>` text, every third sample) and an answer (wrong every fifth);
2. `inspect-<N>.eval` (N = --samples, 100,000) and `inspect-<M>.json` (M = --json-samples, 10,000): the
   template's samples again and again, each with its own id and uuid, written by Inspect's own recorder
   (`EvalRecorder` / `JSONRecorder`, what `inspect_ai.eval` writes logs with), not by hand. Running
   100,000 samples through `eval()` itself takes ~8 ms a sample on 2 cores (13 minutes); the recorder
   writes them in ~5 minutes.

Each log's records, as the reader yields them, are also written as our JSONL (`<log>.jsonl`): the same
traces. Then, each in a fresh process (peak RSS from the kernel): the reader alone over every record
(`read_source`, what `legival ingest` iterates), for the log and for the JSONL; and the whole `legival
ingest` of each into an empty store (validation, grading, one transaction).

    .venv/bin/python benchmarks/source_inspect.py [--samples 100000] [--json-samples 10000]
        [--dir /tmp/legival-inspect-bench] [--no-ingest]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _measure import peak_rss_mib  # noqa: E402

GSM8K = REPO / "examples" / "data" / "gsm8k_test.jsonl"
FLUSH_EVERY = 2000
"""Samples per recorder flush (`eval()`'s default flushes every 10, each flush copying the whole zip)."""


def make_template(out: Path) -> Path:
    """A real Inspect run of the GSM8K test set against mockllm (`template.eval`)."""
    path = out / "template.eval"
    if path.exists():
        return path
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import (
        ChatCompletionChoice,
        ChatMessageAssistant,
        ContentReasoning,
        ContentText,
        ModelOutput,
        ModelUsage,
        get_model,
    )
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    problems = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()]
    by_question = {}
    samples = []
    for i, p in enumerate(problems, start=1):
        solution, gold = (x.strip() for x in p["answer"].rsplit("####", 1))
        gold = gold.replace(",", "")
        said = gold if i % 5 else str(int(gold) + 1)
        steps = solution.replace("<<", "").replace(">>", " ")
        if i % 3:
            msg = ChatMessageAssistant(content=[ContentReasoning(reasoning=steps),
                                                ContentText(text=f"The answer is {said}")], source="generate")
        else:
            msg = ChatMessageAssistant(content=f"<think>{steps}</think>The answer is {said}", source="generate")
        by_question[p["question"]] = msg
        samples.append(Sample(id=i, input=p["question"], target=gold))

    def answer(messages: Any, *_: Any) -> Any:
        # usage given: mockllm would count tokens with tiktoken's o200k_base, not shipped offline
        choice = ChatCompletionChoice(message=by_question[messages[-1].text])
        return ModelOutput(model="mockllm/model", choices=[choice],
                           usage=ModelUsage(input_tokens=100, output_tokens=100, total_tokens=200))

    task = Task(name="gsm8k", dataset=MemoryDataset(samples), solver=generate(), scorer=match(numeric=True))
    log = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=answer), log_dir=str(out / "run"),
                       display="none", log_realtime=False, log_buffer=500, max_samples=200, max_connections=200)[0]
    Path(log.location).rename(path)
    return path


def write_log(template: Path, fmt: str, n: int, out: Path) -> Path:
    """`n` samples cycling through the template's, written by Inspect's recorder for `fmt`."""
    path = out / f"inspect-{n}.{fmt}"
    if path.exists():
        return path
    import shortuuid
    from inspect_ai.log import read_eval_log
    from inspect_ai.log._recorders.create import create_recorder_for_format

    tmpl = read_eval_log(str(template))
    samples = tmpl.samples or []
    assert samples and tmpl.results is not None

    async def write() -> str:
        rec = create_recorder_for_format(fmt, str(out / f"rec-{fmt}"))  # type: ignore[arg-type]
        dataset = tmpl.eval.dataset.model_copy(update={"samples": n, "sample_ids": list(range(1, n + 1))})
        spec = tmpl.eval.model_copy(update={"dataset": dataset, "eval_id": shortuuid.uuid(),
                                            "run_id": shortuuid.uuid(), "task_id": shortuuid.uuid()})
        location = await rec.log_init(spec)
        await rec.log_start(spec, tmpl.plan)
        for i in range(n):
            s = samples[i % len(samples)]
            await rec.log_sample(spec, s.model_copy(update={"id": i + 1, "uuid": shortuuid.uuid()}))
            if fmt == "eval" and (i + 1) % FLUSH_EVERY == 0:
                await rec.flush(spec)
        await rec.log_finish(spec, "success", tmpl.stats, tmpl.results, None)
        return location

    t0 = time.perf_counter()
    Path(asyncio.run(write())).rename(path)
    print(f"wrote {path} ({n:,} samples, {path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.0f} s",
          flush=True)
    return path


def child_read(path: Path, fmt: str, jsonl: Path | None) -> None:
    """(In a child process.) Every record `read_source` yields; optionally written as our JSONL."""
    import importlib

    from legival_core.readers.sources import SourceOptions, read_source, source_info

    module = source_info(fmt).module  # one-time imports (the registry scan, the tool's library) not timed
    if module:
        importlib.import_module(module + ".log")
    t0 = time.perf_counter()
    n = bad = 0
    sink = jsonl.open("w", encoding="utf-8") if jsonl else None
    _, _, records = read_source(path, fmt, SourceOptions())
    for _, rec in records:
        n += 1
        if not isinstance(rec, dict):
            bad += 1
        elif sink:
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if sink:
        sink.close()
    print(json.dumps({"records": n, "bad": bad, "s": time.perf_counter() - t0, "peak_rss_mib": peak_rss_mib()}))


def run_child(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB as the child reports it on its last line, stdout) of one child."""
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{err[-3000:]}")
    return wall, _peak(out), out


def _peak(out: str) -> float:
    last = json.loads(out.strip().splitlines()[-1])
    return float(last.get("peak_rss_mib", float("nan")))


def ingest(path: Path, fmt: str, db: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of `legival ingest` into an empty store, in a child process."""
    db.unlink(missing_ok=True)
    code = ("import runpy, sys, json\n"
            f"sys.path.insert(0, {str(REPO / 'benchmarks')!r})\n"
            "from source_inspect import peak_rss_mib\n"
            f"sys.argv = ['legival', 'ingest', {str(path)!r}, '--db', {str(db)!r}, '--from', {fmt!r}]\n"
            "try:\n    runpy.run_module('legival', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print(json.dumps({'peak_rss_mib': peak_rss_mib()}))\n")
    wall, rss, _ = run_child([sys.executable, "-c", code])
    db.unlink(missing_ok=True)
    return wall, rss


def measure(log: Path, fmt: str, out: Path, with_ingest: bool) -> None:
    own = out / f"{log.name}.jsonl"
    me = [sys.executable, __file__, "--child-read", str(log), "inspect"]
    if not own.exists():
        run_child([*me, "--write-jsonl", str(own)])
    rows = []
    for name, path, src in (("inspect", log, "inspect"), ("legival JSONL", own, "legival")):
        wall, rss, got = run_child([sys.executable, __file__, "--child-read", str(path), src])
        r = json.loads(got.strip().splitlines()[-1])
        row = {"source": name, "file": path.name, "MiB": path.stat().st_size / 2**20, "records": r["records"],
               "read_s": r["s"], "read_per_s": r["records"] / r["s"], "read_rss": rss}
        if with_ingest:
            row["ingest_s"], row["ingest_rss"] = ingest(path, src, out / "bench.duckdb")
        rows.append(row)
    a, b = rows
    print(f"\n{fmt} log: {log.name} ({a['MiB']:,.0f} MiB, {a['records']:,} samples); JSONL {b['MiB']:,.0f} MiB")
    for r in rows:
        line = (f"  {r['source']:14} read {r['read_s']:8.1f} s  {r['read_per_s']:9,.0f} records/s  "
                f"peak RSS {r['read_rss']:6,.0f} MiB")
        if with_ingest:
            line += f"  | legival ingest {r['ingest_s']:7.1f} s  peak RSS {r['ingest_rss']:6,.0f} MiB"
        print(line)
    line = f"  ratio inspect/JSONL: read {a['read_s'] / b['read_s']:.1f}x slower"
    if with_ingest:
        line += f", ingest {a['ingest_s'] / b['ingest_s']:.1f}x slower"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--json-samples", type=int, default=10_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/legival-inspect-bench"))
    ap.add_argument("--no-ingest", action="store_true", help="time the readers only")
    ap.add_argument("--child-read", nargs=2, metavar=("PATH", "FORMAT"), help=argparse.SUPPRESS)
    ap.add_argument("--write-jsonl", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_read:
        child_read(Path(a.child_read[0]), a.child_read[1], a.write_jsonl)
        return
    os.environ.setdefault("XDG_DATA_HOME", str(a.dir / "xdg-data"))  # Inspect's sample buffer, traces
    a.dir.mkdir(parents=True, exist_ok=True)
    template = make_template(a.dir)
    logs = [("eval", write_log(template, "eval", a.samples, a.dir))]
    if a.json_samples:
        logs.append(("json", write_log(template, "json", a.json_samples, a.dir)))
    for fmt, log in logs:
        measure(log, fmt, a.dir, not a.no_ingest)


if __name__ == "__main__":
    main()
