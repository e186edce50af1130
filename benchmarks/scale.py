"""Paper-scale store benchmark (issue 14): a store of the paper's size, and the product's own paths on it.

The store (`_scale_store.py`, cached under .cache/scale/ so reruns skip it): 12 teachers x 3 datasets,
~100k traces of real reasoning sentences (~10M Punkt steps, r_i and efficiency metric rows), 2 students
at the SPEC depths (~36 per trace at s = 3, ~6M rollouts). Each run works on a copy of it and
measures, each phase in a fresh process so its peak RSS is its own:

(a) resume planning after 1% of the rollouts were deleted (`writes.delete_rollouts` of a seeded
    sample): `run_stage` of `TransferStage(student, teacher, dataset)` for every (teacher, dataset,
    student) shard, as a flow's shard task runs it (the segment stage it requires, then `plan`), with
    an executor that only records what it is given; the planned rollouts must be exactly the deleted;
(b) committing 100k rollout rows as a running flow does: a third student's shards planned by the
    real `plan`, chunks of `traces_per_chunk` traces (rows like the rollout loop's) built by an engine
    thread as fast as it can and handed over as the Ray engine pool does (`SyntheticRollouts`: every
    chunk finished by the time the driver asks, together), each hand-over committed by `run_stage` /
    `TransferStage.commit` in one transaction; baseline in the same run: a fourth student's chunks
    handed over one at a time (one transaction per chunk); only the commits are timed;
(c) the report `legival report` writes (`reports.stage.build_reports`, the spec's default 1,000
    bootstrap resamples, every file) from the store opened read-only;
(d) the peak RSS of each phase and the store's file size;
(e) `legival plan examples/paper.yaml` on the store (`plan.build.scratch_plan`, as the command runs it;
    issue 14 asks for a paper-matrix plan in under 60 s without a GPU).

    .venv/bin/python benchmarks/scale.py [--traces 100000] [--store PATH] [--keep]

Targets on the 2-core machine: (a) < 30 s, (b) < 5 s, (c) < 120 s, peak RSS < 8 GiB, (e) < 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _measure import load_average, machine_at_start, peak_rss_mib, run_phase  # noqa: E402

TARGETS = {"resume_plan_s": 30.0, "commit_s": 5.0, "report_s": 120.0, "peak_rss_gib": 8.0, "paper_plan_s": 60.0}


# ------------------------------------------------------------------------------------------ phases


def phase_generate(db: Path, traces: int, mean_steps: float, seed: int) -> dict[str, Any]:
    from _scale_store import ScaleShape, build_store, check_segmentation

    tmp = db.with_name(db.name + ".partial")
    tmp.unlink(missing_ok=True)

    def progress(done: int, total: int, c: Any) -> None:
        print(f"  generated {done:,}/{total:,} traces, {c.rollouts:,} rollouts", file=sys.stderr, flush=True)

    counts = build_store(tmp, ScaleShape(traces, mean_steps, seed), progress)
    same, checked = check_segmentation(tmp)
    tmp.rename(db)
    return {"phase": "generate", **counts.as_dict(), "segmentation_matches": same, "segmentation_checked": checked,
            "peak_rss_mib": round(peak_rss_mib(children=True))}


class RecordingExecutor:
    """An executor that runs nothing: it keeps the keys of the rollouts each plan hands it."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str, int]] = []

    def run(self, work: Any, units: Any) -> Any:
        key = work.process.config.student_key  # a hash: once per shard, not per rollout (1.4 s of 57k)
        for trace, plans in units:
            self.keys.extend((trace.trace_id, key, p.k) for p in plans)
        return iter(())


def phase_plan(db: Path) -> dict[str, Any]:
    from legival_core.plan.build import scratch_plan
    from legival_core.run_config import load_spec

    spec = load_spec(ROOT / "examples" / "paper.yaml")
    t0 = time.perf_counter()
    plan = scratch_plan(spec, db)
    wall = time.perf_counter() - t0
    t = plan.totals()
    return {"phase": "plan", "paper_plan_s": round(wall, 2), "rollouts": t["rollouts_missing"],
            "prompt_tokens": t["prompt_tokens"], "judge_calls": t["judge_calls"], "generations": t["generations"],
            "peak_rss_mib": round(peak_rss_mib(children=True))}


def phase_resume(db: Path, fraction: float, seed: int) -> dict[str, Any]:
    from _scale_store import DATASETS, TEACHERS, students

    from legival_core.run_config import Execution
    from legival_core.stages.base import run_stage
    from legival_core.stages.transfer import TransferStage
    from legival_core.store import Store, writes
    from legival_core.store import planner as reads

    with Store(db) as store:
        t0 = time.perf_counter()
        gone = reads.sample_rollout_keys(store, fraction, seed)
        deleted = writes.delete_rollouts(store, gone)
        delete_s = time.perf_counter() - t0
        rec = RecordingExecutor()
        per_shard = []
        t0 = time.perf_counter()
        for s in students():
            for teacher in TEACHERS:
                for dataset in DATASETS:
                    t1 = time.perf_counter()
                    run_stage(TransferStage(s, teacher, dataset, traces_per_chunk=Execution().traces_per_chunk),
                              store, rec)
                    per_shard.append(time.perf_counter() - t1)
        plan_s = time.perf_counter() - t0
    want = set(zip(gone["trace_id"].to_list(), gone["student_key"].to_list(), gone["k"].to_list(), strict=True))
    got = set(rec.keys)
    return {"phase": "resume", "deleted": deleted, "sampled": gone.height, "planned_missing": len(rec.keys),
            "exact": got == want and len(rec.keys) == len(want) and deleted == len(want),
            "shards": len(per_shard), "resume_plan_s": round(plan_s, 2), "slowest_shard_s": round(max(per_shard), 2),
            "delete_s": round(delete_s, 2), "peak_rss_mib": round(peak_rss_mib(children=True))}


class SyntheticRollouts:
    """An executor standing in for the student workers: each chunk of units becomes one batch of rows
    shaped like `rollout_chunk`'s, until `budget` rows were produced.

    `ready_sets` False: chunks are handed over one at a time (the in-process executor; one transaction
    per chunk). True: as the Ray engine pool hands them over (`tasks.ray_pool.RayExecutor.run`): an
    engine process builds the chunks as fast as it can (and ships them back pickled, as Ray does)
    while the driver blocks for the first finished chunk, then takes every other finished one
    (`ray.wait(num_returns=1)`, then `timeout=0`) and yields them together, so `run_stage` commits them
    in one transaction. Nothing is held back: a set is what had finished when the driver came back
    from its last commit, so its size follows how much faster the engines are than the commits."""

    def __init__(self, budget: int, seed: int, ready_sets: bool = False) -> None:
        self.left = budget
        self.seed = seed
        self.batches = 0
        self.ready_sets = ready_sets

    def run(self, work: Any, units: Any) -> Any:
        key = work.process.config.student_key
        chunks = []
        for i in range(0, len(units), work.chunk_size):
            if self.left <= 0:
                break
            part = [(t.trace_id, p.k, p.m, p.bin) for t, plans in units[i : i + work.chunk_size] for p in plans]
            part = part[: self.left]
            self.left -= len(part)
            self.batches += 1
            chunks.append((key, part, self.seed + self.batches))
        if not self.ready_sets:
            return ([build_chunk(c)] for c in chunks)
        return self._ready_sets(chunks)

    @staticmethod
    def _ready_sets(chunks: list[Any]) -> Any:
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        if not chunks:
            return
        with ProcessPoolExecutor(max_workers=1) as engine:
            order = {}
            pending = set()
            for i, c in enumerate(chunks):
                f = engine.submit(build_chunk, c)
                order[f] = i
                pending.add(f)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                more, pending = wait(pending, timeout=0)
                yield [f.result() for f in sorted(done | more, key=order.__getitem__)]


def build_chunk(chunk: tuple[str, list[tuple[str, int, int, int]], int]) -> Any:
    """One chunk's rows, shaped like `rollout_chunk`'s (module level: an engine process runs it)."""
    import numpy as np

    from legival_core.stages.transfer import STAT_FIELDS, RolloutBatch

    key, part, seed = chunk
    r = np.random.default_rng(seed)
    rows = []
    for trace_id, k, m, b in part:
        ok = bool(r.random() < 0.2 + 0.6 * k / m)
        text = " ".join(["Then we add the remaining amounts to get the total."] * int(r.integers(1, 6)))
        rows.append({
            "trace_id": trace_id, "student_key": key, "k": k, "sample": 0, "m": m, "bin": b, "status": "ok",
            "correct": ok, "forced": False, "extracted": "42" if ok else "41", "grade_status": "ok",
            "continuation": f"{text} The answer is \\boxed{{{42 if ok else 41}}}.", "forced_continuation": None,
            "prompt_tokens": 220 + 20 * k, "completion_tokens": int(r.integers(20, 300)),
            "prefill_computed": 60, "prefill_cached": 160 + 20 * k, "finish_reason": "rule",
        })
    return RolloutBatch(rows, dict.fromkeys(STAT_FIELDS, 0))


class TimedCommits:
    """The transfer stage with its commits timed (plan and run are the stage's own)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.rows = 0
        self.commits = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def needs(self) -> tuple[str, ...]:
        return tuple(self.inner.needs)

    @property
    def requires(self) -> tuple[Any, ...]:
        return tuple(self.inner.requires)

    def plan(self, store: Any) -> Any:
        return self.inner.plan(store)

    def run(self, units: Any, executor: Any) -> Any:
        return self.inner.run(units, executor)

    def commit(self, store: Any, results: Any, plan: Any) -> int:
        t0 = time.perf_counter()
        n = int(self.inner.commit(store, results, plan))
        self.seconds += time.perf_counter() - t0
        self.rows += n
        self.commits += 1
        return n


def phase_commit(db: Path, rows: int, seed: int, ready_sets: bool) -> dict[str, Any]:
    """`ready_sets`: chunks handed over as the Ray engine pool does (every finished chunk at once);
    else one at a time, one transaction each (measured with another new student)."""
    from _scale_store import DATASETS, TEACHERS

    from legival_core.run_config import Execution, student_config
    from legival_core.stages.base import run_stage
    from legival_core.stages.transfer import TransferStage
    from legival_core.store import Store

    model = "Qwen/Qwen2.5-1.5B-Instruct" if ready_sets else "Qwen/Qwen2.5-3B-Instruct"
    student = student_config(name=model.split("/")[1].lower(), model=model, backend="vllm", dtype="bfloat16")
    ex = SyntheticRollouts(rows, seed, ready_sets)
    timed = []
    store = Store(db)
    before = store.count("rollouts")
    t0 = time.perf_counter()
    for teacher in TEACHERS:
        for dataset in DATASETS:
            if ex.left <= 0:
                break
            stage = TimedCommits(TransferStage(student, teacher, dataset,
                                               traces_per_chunk=Execution().traces_per_chunk))
            run_stage(stage, store, ex)
            timed.append(stage)
    wall = time.perf_counter() - t0
    added = store.count("rollouts") - before
    t0 = time.perf_counter()
    store.close()  # folds the write-ahead log into the file (CHECKPOINT_THRESHOLD): reported apart
    close_s = time.perf_counter() - t0
    return {"phase": "commit", "rows": sum(t.rows for t in timed), "stored": added, "chunks": ex.batches,
            "commits": sum(t.commits for t in timed), "shards": len(timed),
            "commit_s": round(sum(t.seconds for t in timed), 2), "plan_and_run_s": round(wall, 2),
            "close_checkpoint_s": round(close_s, 2), "peak_rss_mib": round(peak_rss_mib(children=True))}


def phase_report(db: Path, out: Path, resamples: int) -> dict[str, Any]:
    from legival_core.reports.stage import ReportConfig, build_reports
    from legival_core.store import Store

    t0 = time.perf_counter()
    with Store(db, read_only=True) as store:  # as `legival report` opens it
        result = build_reports(store, out, ReportConfig(resamples=resamples))
    wall = time.perf_counter() - t0
    files = sorted(result.files)
    size = sum((out / f).stat().st_size for f in files if (out / f).is_file())
    data = result.data
    return {"phase": "report", "report_s": round(wall, 2), "files": len(files), "report_mib": round(size / 2**20, 1),
            "resamples": data.boot.n_resamples if data is not None and data.boot is not None else 0,
            "teachers": data.teacher_metrics.height if data is not None else 0,
            "rollouts_counted": int(data.aggregates.by_dataset["n_rollouts"].sum()) if data is not None else 0,
            "peak_rss_mib": round(peak_rss_mib(children=True))}


# ------------------------------------------------------------------------------------------ driver


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"


def main() -> None:
    from legival_core.run_config import Report, default_of

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=int, default=100_000, help="traces in all (12 teachers x 3 datasets)")
    ap.add_argument("--mean-steps", type=float, default=105.0, help="mean Punkt steps per trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", type=Path, help="the generated store (default: .cache/scale/<shape>.duckdb)")
    ap.add_argument("--delete-fraction", type=float, default=0.01)
    ap.add_argument("--commit-rows", type=int, default=100_000)
    ap.add_argument("--resamples", type=int, default=default_of(Report, "resamples"))
    ap.add_argument("--keep", action="store_true", help="keep the measured copy and the report directory")
    ap.add_argument("--phase", choices=["generate", "plan", "resume", "commit", "report"], help=argparse.SUPPRESS)
    ap.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--one-per-chunk", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phase is not None:
        result = {
            "generate": lambda: phase_generate(a.db, a.traces, a.mean_steps, a.seed),
            "plan": lambda: phase_plan(a.db),
            "resume": lambda: phase_resume(a.db, a.delete_fraction, a.seed),
            "commit": lambda: phase_commit(a.db, a.commit_rows, a.seed, not a.one_per_chunk),
            "report": lambda: phase_report(a.db, a.out, a.resamples),
        }[a.phase]()
        print(json.dumps(result), flush=True)
        return

    from _scale_store import ScaleShape, store_path

    store = store_path(ScaleShape(a.traces, a.mean_steps, a.seed), a.store)
    load = machine_at_start()
    common = ["--traces", str(a.traces), "--mean-steps", str(a.mean_steps), "--seed", str(a.seed)]
    gen: dict[str, Any] = {"phase": "generate", "cached": True}
    if not store.exists():
        print(f"generating {store} (once; reruns reuse it) ...", flush=True)
        t0 = time.perf_counter()
        gen = run_phase(__file__, ["--phase", "generate", "--db", str(store), *common])
        gen["wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"generated in {gen['wall_s']} s: {gen['traces']:,} traces, {gen['steps']:,} steps, "
              f"{gen['rollouts']:,} rollouts; segmenter agrees on {gen['segmentation_matches']}/"
              f"{gen['segmentation_checked']} re-segmented traces", flush=True)
    size = store.stat().st_size
    work = store.with_name(f"work-{os.getpid()}.duckdb")
    out = store.with_name(f"report-{os.getpid()}")
    t0 = time.perf_counter()
    shutil.copyfile(store, work)
    copy_s = time.perf_counter() - t0
    try:
        rep = run_phase(__file__, ["--phase", "report", "--db", str(work), "--out", str(out),
                                   "--resamples", str(a.resamples)])
        pln = run_phase(__file__, ["--phase", "plan", "--db", str(work)])
        res = run_phase(__file__, ["--phase", "resume", "--db", str(work), "--delete-fraction", str(a.delete_fraction),
                                   "--seed", str(a.seed)])
        com = run_phase(__file__, ["--phase", "commit", "--db", str(work), "--commit-rows", str(a.commit_rows),
                                   "--seed", str(a.seed)])
        per_chunk = run_phase(__file__, ["--phase", "commit", "--db", str(work), "--commit-rows", str(a.commit_rows),
                                         "--seed", str(a.seed), "--one-per-chunk"])
    finally:
        if not a.keep:
            work.unlink(missing_ok=True)
            work.with_name(work.name + ".wal").unlink(missing_ok=True)
            shutil.rmtree(out, ignore_errors=True)
    peak = max(rep["peak_rss_mib"], res["peak_rss_mib"], com["peak_rss_mib"], per_chunk["peak_rss_mib"],
               pln["peak_rss_mib"])
    end_load = load_average()
    figures = {
        "resume_plan_s": res["resume_plan_s"], "commit_s": com["commit_s"], "report_s": rep["report_s"],
        "peak_rss_gib": round(peak / 1024, 2), "paper_plan_s": pln["paper_plan_s"],
    }
    ok = {k: figures[k] < TARGETS[k] for k in TARGETS}

    def mark(k: str) -> str:
        return "ok" if ok[k] else "MISSED"

    print(f"store: {store} ({gib(size)}; copied in {copy_s:.1f} s)")
    print(f"(a) resume plan, {res['shards']} shards, after deleting {res['deleted']:,} rollouts "
          f"({a.delete_fraction:.0%}): {res['resume_plan_s']:.1f} s  (target < {TARGETS['resume_plan_s']:g} s) "
          f"{mark('resume_plan_s')}; planned exactly the deleted rollouts: {'yes' if res['exact'] else 'NO'} "
          f"({res['planned_missing']:,} planned)")
    print(f"(b) commit {com['rows']:,} rollout rows ({com['chunks']:,} chunks) as the engine pool hands them over "
          f"(every finished chunk at once), {com['commits']:,} transactions: {com['commit_s']:.1f} s  "
          f"(target < {TARGETS['commit_s']:g} s) {mark('commit_s')}; closing the store then checkpoints in "
          f"{com['close_checkpoint_s']:.1f} s")
    print(f"    baseline in the same run, one chunk at a time (the in-process executor), {per_chunk['commits']:,} "
          f"transactions: {per_chunk['commit_s']:.1f} s ({per_chunk['commit_s'] / max(com['commit_s'], 1e-9):.1f}x)")
    print(f"(c) report, {rep['resamples']:,} resamples, {rep['files']} files ({rep['report_mib']} MiB): "
          f"{rep['report_s']:.1f} s  (target < {TARGETS['report_s']:g} s) {mark('report_s')}")
    print(f"(d) peak RSS {figures['peak_rss_gib']:.2f} GiB (report {rep['peak_rss_mib']:,} MiB, resume "
          f"{res['peak_rss_mib']:,} MiB, commit {com['peak_rss_mib']:,} MiB)  (target < {TARGETS['peak_rss_gib']:g} GiB) "
          f"{mark('peak_rss_gib')}; store file {gib(size)}")
    print(f"(e) legival plan examples/paper.yaml: {pln['rollouts']:,} rollouts, {pln['judge_calls']:,} judge calls, "
          f"{pln['generations']:,} generations planned in {pln['paper_plan_s']:.1f} s  (target < "
          f"{TARGETS['paper_plan_s']:g} s) {mark('paper_plan_s')}; peak RSS {pln['peak_rss_mib']:,} MiB")
    print(f"machine: load average {end_load[0]} {end_load[1]} {end_load[2]} at the end", flush=True)
    print(json.dumps({"figures": figures, "targets": TARGETS, "ok": ok, "exact": res["exact"], "store_bytes": size,
                      "generate": gen, "resume": res, "commit": com, "commit_per_chunk": per_chunk, "report": rep,
                      "plan": pln,
                      "load_start": load, "load_end": end_load}), flush=True)


if __name__ == "__main__":
    main()
