"""Issue 28: the plan's rates calibrated on a store's recorded shards, its expected decode from stored
rollouts, and a shard's expected work chunked and routed as the run sends it."""

from __future__ import annotations

from typing import Any

import pytest

from legival_core.plan.calibration import MIN_SECONDS, Signature, calibrated, engine_starts
from legival_core.plan.throughput import DecodeDefaults, load_table
from legival_core.plan.timing import expected_decode, shard_work
from legival_core.run_config import student_config
from legival_core.stages.base import engine_for
from legival_core.store import Store
from legival_core.store.timings import shard_timings
from legival_core.transfer.cost import EngineWork, Expected, PassDecode, planned_chunk

SIG = Signature("SmolLM2-135M-Instruct-Q4_1-gguf", "embedded", "float32", "cpu")
WORK = EngineWork(chunks=2, prefill=1000, decode_steps=100, decode=500, context=200_000)


def _row(run: str, teacher: str, batch: int, compute_s: float, *, host: str = "here", t0: float = 1000.0,
         load_s: float = 0.0, end: float = 1060.0, model: str = SIG.model, work: EngineWork = WORK,
         load_at: float | None = None, engines: int = 1) -> dict[str, Any]:
    """A committed batch of shard (`run`, `teacher`); its shard planned at `t0`, its model load (if
    `load_s`) started at `load_at` (default: a second after the plan, as a load on first use)."""
    return {"run_id": run, "source": "run", "teacher": teacher, "dataset": "gsm8k", "student": "s", "student_key": "k",
            "batch": batch, "model": model, "backend": "embedded", "dtype": "float32", "accelerator": "cpu",
            "device": "cpu, 2 threads", "host": host, "engines": engines, "chunks": work.chunks, "rollouts": 10,
            "forced": 5, "prefill": work.prefill, "decode_steps": work.decode_steps, "decode": work.decode, "context": work.context,
            "compute_s": compute_s, "load_s": load_s,
            "load_started": (t0 + 1 if load_at is None else load_at) if load_s else None,
            "shard_started": t0, "committed": end}


def _store(tmp_path: Any, rows: list[dict[str, Any]]) -> Store:
    store = Store(tmp_path / "t.duckdb")
    with store.transaction():
        store.insert_rows("transfer_timings", rows)
    return store


def test_no_record_no_calibration(tmp_path: Any) -> None:
    row = load_table().row(SIG.model, "cpu")
    with _store(tmp_path, [_row("r1", "a", 0, 10.0, model="other")]) as store:
        assert calibrated(store, row, SIG, host="here") is None


def test_a_read_only_store_older_than_the_table_has_no_record(tmp_path: Any) -> None:
    """`transfer_timings` came without a schema bump: an older store gets it on its next writable
    open, and a read-only open (a plan reading the store itself) finds no record instead of failing."""
    row = load_table().row(SIG.model, "cpu")
    with _store(tmp_path, [_row("r1", "a", 0, 10.0)]) as store:
        store._run("DROP TABLE transfer_timings")
    with Store(tmp_path / "t.duckdb", read_only=True, create=False) as store:
        assert not store.has_table("transfer_timings") and calibrated(store, row, SIG, host="here") is None
    with Store(tmp_path / "t.duckdb") as store:
        assert store.has_table("transfer_timings")


def test_one_factor_on_the_newest_run_and_the_measured_start(tmp_path: Any) -> None:
    row = load_table().row(SIG.model, "cpu")
    modelled = row.rates().seconds(WORK)
    rows = [  # run r2 is the newest (its commits are the latest); each of its shards took 1.5x the model
        _row("r2", "a", 0, 1.5 * modelled, t0=2000, load_s=5.0, end=2000 + 3 * modelled + 12),
        _row("r2", "b", 0, 1.5 * modelled, t0=2000, end=2000 + 3 * modelled + 12),
        _row("r1", "a", 0, 3.0 * modelled, t0=1000, load_s=5.0, end=1000 + 3 * modelled + 30),
        _row("r9", "a", 0, 9.0 * modelled, host="elsewhere", t0=5000, end=9000),  # another host: not used
    ]
    with _store(tmp_path, rows) as store:
        assert 3 * modelled >= MIN_SECONDS  # r2 alone holds enough engine time: r1, older, is left out
        cal = calibrated(store, row, SIG, host="here")
        assert cal is not None and cal.basis == "calibrated" and cal.spread == 1.0
        assert cal.rates.seconds(WORK) == pytest.approx(1.5 * modelled)
        assert cal.rates.load_s == pytest.approx(12.0)  # its wall beyond its engine seconds
        assert "2 shard(s) of run r2" in cal.source and "1.50 x the costs of the cpu row" in cal.source
        # with no record on this host, those of the others are used (and named)
        other = calibrated(store, row, SIG, host="nowhere")
        assert other is not None and "elsewhere" in other.source and "here" in other.source


def test_too_little_engine_time_takes_the_runs_before(tmp_path: Any) -> None:
    row = load_table().row(SIG.model, "cpu")
    rows = [_row("r2", "a", 0, 1.0, t0=2000, end=2005), _row("r1", "a", 0, 2 * MIN_SECONDS, t0=1000, end=1100),
            _row("r0", "a", 0, 99.0, t0=500, end=600)]
    with _store(tmp_path, rows) as store:
        cal = calibrated(store, row, SIG, host="here")
        assert cal is not None and "2 shard(s) of runs r2 and 1 before it" in cal.source
        factor = (1.0 + 2 * MIN_SECONDS) / (2 * row.rates().seconds(WORK))
        assert cal.rates.seconds(WORK) == pytest.approx(factor * row.rates().seconds(WORK))
        assert "engine start 9 s from the row" in cal.source  # no run loaded a model


def test_a_run_without_a_model_load_gives_no_start(tmp_path: Any) -> None:
    frame_rows = [_row("r1", "a", 0, 30.0, load_s=0.0, end=1050.0), _row("r1", "b", 0, 10.0, load_s=4.0, end=1060.0)]
    with _store(tmp_path, frame_rows) as store:
        frame = shard_timings(store, SIG.model, SIG.backend, SIG.dtype, SIG.accelerator)
        # from the first shard's start (1000; the load started at 1001) to the last commit (1060): 60 s,
        # of which 40 engine seconds on one engine: 20 s of start
        assert engine_starts(frame) == [pytest.approx(20.0)]
        assert engine_starts(frame.filter(frame["teacher"] == "a")) == []  # that shard loaded nothing


def test_a_prewarmed_engine_starts_with_its_load_never_its_wait(tmp_path: Any) -> None:
    """Issue 38 item 9: a run's first student's engine loads early (prewarmed) and then waits while
    the efficiency stage runs; its transfer's start is measured as the run measures its transfer
    (`plan_vs_actual`): from the first shard's plan to the last commit, plus the part of the load
    before that plan, never the wait. Each run below takes 30 engine seconds after a 7.7 s load and
    5 s of Ray, plans and commits: each measures a 12.7 s start."""
    load, overhead, compute = 7.7, 5.0, 30.0
    rows = [
        # prewarmed 112 s before its first shard: the load ended long before the stage started
        _row("prewarmed", "a", 0, 20.0, load_s=load, load_at=1000 - 112, end=1000 + overhead + compute - 1),
        _row("prewarmed", "b", 0, 10.0, end=1000 + overhead + compute),
        # loaded on first use, a second after the plan: the load is inside the stage's wall time
        _row("on first use", "a", 0, compute, t0=2000, load_s=load, end=2000 + load + overhead + compute),
        # prewarmed 5 s before the stage: 5 s of its load before the plan, the rest inside
        _row("straddling", "a", 0, compute, t0=3000, load_s=load, load_at=3000 - 5,
             end=3000 + (load - 5) + overhead + compute),
        # two engines, both prewarmed side by side (one load each, reported by each shard's first
        # batch): the longest part before the plan counts, not their sum; 60 engine-s on 2 engines
        _row("two engines", "a", 0, compute, t0=4000, load_s=load, load_at=3800, engines=2,
             end=4000 + overhead + compute),
        _row("two engines", "b", 0, compute, t0=4000, load_s=load, load_at=3801, engines=2,
             end=4000 + overhead + compute),
    ]
    with _store(tmp_path, rows) as store:
        frame = shard_timings(store, SIG.model, SIG.backend, SIG.dtype, SIG.accelerator)
        starts = dict(zip(frame.unique("run_id", maintain_order=True)["run_id"].to_list(), engine_starts(frame),
                          strict=True))
        assert starts == {run: pytest.approx(load + overhead) for run in
                          ("two engines", "straddling", "on first use", "prewarmed")}, starts
        # calibrated on the prewarmed run alone: the plan's engine start is its load and overhead (the
        # wait counted as start made it 117 s)
        store._run("DELETE FROM transfer_timings WHERE run_id <> 'prewarmed'")
        cal = calibrated(store, load_table().row(SIG.model, "cpu"), SIG, host="here")
        assert cal is not None and cal.rates.load_s == pytest.approx(load + overhead)
        assert "engine start 13 s measured" in cal.source


DEFAULTS = DecodeDefaults(first_share=0.5, first_at_budget=0.25, forced_share=0.5, forced_tokens=8,
                          forced_at_budget=0.0, source="test defaults")


def test_expected_decode_default_then_from_stored_rollouts(store: Store) -> None:
    config = student_config(max_new_tokens=10, forcing_max_tokens=6)
    e = expected_decode(store, config, 3, DEFAULTS)
    assert e == Expected(PassDecode(5.0, 0.25, 10), 0.5, PassDecode(6, 0.0, 6), 3, "default: test defaults")
    rollouts = [  # (forced, finish of the first pass, tokens of both passes)
        (False, "rule", 4), (False, "length", 10),  # answered in the first pass
        (True, "length", 12), (True, "length", 16),  # ran to the budget, then 2 and 6 (= the forcing budget)
        (True, "stop", 7),                           # stopped early without an answer, then forced
    ]
    with store.transaction():
        store.insert_rows("rollouts", [
            {"trace_id": f"t{i}", "student_key": config.student_key, "k": 0, "sample": 0, "m": 1, "bin": 0,
             "status": "ok", "forced": f, "finish_reason": fin, "completion_tokens": n, "prompt_tokens": 50}
            for i, (f, fin, n) in enumerate(rollouts)])
    e = expected_decode(store, config, 3, DEFAULTS)
    forced_mean = ((12 - 10) + (16 - 10)) / 2  # measured on the forced rollouts whose first pass hit the budget
    first = (4 + 10 + 10 + 10 + (7 - forced_mean)) / 5
    assert e.first == PassDecode(pytest.approx(first), 3 / 5, 10)  # type: ignore[arg-type]
    assert e.forced_share == 3 / 5 and e.forced == PassDecode(forced_mean, 1 / 2, 6)
    assert e.source == "measured on 5 stored rollouts of the student"


def test_shard_work_chunks_each_engines_traces_in_order() -> None:
    expect = Expected(PassDecode(8, 1.0, 8), 0.5, PassDecode(3, 0.0, 10), 2, "test")
    traces = [(f"trace-{i}", [100 + 10 * i, 200 + 10 * i]) for i in range(7)]
    one = shard_work(traces, per_chunk=3, engines=1, expect=expect, max_batch=4)
    want = sum((planned_chunk([s for _, s in traces[i : i + 3]], expect, 4) for i in (0, 3, 6)), EngineWork())
    assert one == want and one.chunks == 3
    two = shard_work(traces, per_chunk=3, engines=2, expect=expect, max_batch=4)
    mine = [[s for t, s in traces if engine_for(t, 2) == e] for e in (0, 1)]
    want2 = sum((planned_chunk(m[i : i + 3], expect, 4) for m in mine for i in range(0, len(m), 3)), EngineWork())
    assert two == want2 and two.chunks == sum(-(-len(m) // 3) for m in mine)
    assert shard_work([("t", [])], 3, 1, expect, 4) == EngineWork()
