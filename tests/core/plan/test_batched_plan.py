"""Issue 38 item 7: `legival plan` reads a spec's shards together and ingests its trace files in one
transaction. Both must give what the run's own per-unit paths give, which stay the reference: each
shard's `TransferStage.missing` and `units` (the plan as it was built shard by shard), and each
file's `ingest_spec_file`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from legival_core.bulk import spread
from legival_core.datasets.base import get_dataset
from legival_core.plan import build, shards
from legival_core.plan import ingest as plan_ingest
from legival_core.plan.build import _count_prompts, _missing_depths, plan_benchmark
from legival_core.plan.model import ShardPlan
from legival_core.plan.prompts import PromptCounter
from legival_core.plan.throughput import Table, load_table
from legival_core.plan.timing import expected_decode, max_batch_of, shard_work
from legival_core.readers.trace_records import IngestError
from legival_core.run_config import BenchmarkSpec, load_spec
from legival_core.stages.ingest import ingest_spec_file
from legival_core.stages.transfer import TransferStage, shard_chunk
from legival_core.store import Store
from legival_core.store import planner as reads
from tests.conftest import REPO
from tests.core.reports.test_demo_snapshot import load_demo_store

DEMO = REPO / "examples" / "demo.yaml"
DEMO_TRACES = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"


def _estimate(_model: str, _options: dict[str, Any]) -> PromptCounter:
    return PromptCounter(None, "test")


def _per_shard(spec: BenchmarkSpec, store: Store, sample: int, table: Table) -> list[ShardPlan]:
    """The plan's shards as they were built before, one `TransferStage` per shard."""
    out = []
    for st in spec.students:
        config = spec.student_config(st)
        counter = _estimate(config.model, {})
        mean_decode = reads.mean_rollout_completion_tokens(store, config.student_key)
        for t in spec.teachers:
            for d in spec.datasets:
                stage = TransferStage(config, t.name, d, spec.transfer.limit)
                m = stage.missing(store)
                s, work = m.summary, m.rows.height
                shard = ShardPlan(t.name, d, st.name, s.transfer_traces, s.rollouts_total, s.rollouts_cached,
                                  s.rollouts_total - s.rollouts_cached, work)
                rows = m.rows[spread(range(work), sample)] if work > sample else m.rows
                units = stage.units(store, rows, m.done)
                depths = _missing_depths(m.rows, m.done, config) if work > sample else None
                dataset = get_dataset(d)
                tokens, counted, sizes = _count_prompts(counter, dataset.system_prompt, units, work, depths)
                shard.prompt_tokens, shard.prompt_tokens_computed = tokens.requested, tokens.computed
                shard.prompt_tokens_counted = counted
                per_chunk = shard_chunk(s.transfer_traces, s.rollouts_total, spec.execution.traces_per_chunk)
                shard.chunks = -(-work // max(1, per_chunk))
                if sizes:
                    expect = expected_decode(store, config, counter.text_tokens(dataset.forcing_text), table.decode)
                    shard.work = shard_work(sizes, per_chunk, spec.execution.max_concurrent_engines, expect,
                                            max_batch_of(config)).scaled(work / len(sizes))
                shard.decode_budget = shard.rollouts_missing * config.max_new_tokens
                shard.forcing_budget = shard.rollouts_missing * config.forcing_max_tokens
                if mean_decode is not None:
                    shard.expected_decode = round(mean_decode * shard.rollouts_missing)
                elif shard.rollouts_missing == 0:
                    shard.expected_decode = 0
                out.append(shard)
    return out


@pytest.mark.parametrize("small", [False, True], ids=["defaults", "small-groups"])
def test_shards_read_together_equal_each_shards_own_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         small: bool) -> None:
    """The stored demo with one teacher's rollouts deleted and others partly, every transfer trace
    (no limit), a sample of 10: shards with some and all of their rollouts missing, sampled and exact;
    `small` also cuts the groups so that cells are read alone, together and across groups."""
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["transfer"]["limit"] = None
    data["execution"]["max_concurrent_engines"] = 2
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    spec = load_spec(spec_file, check_files=False)
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    if small:
        monkeypatch.setattr(shards, "ALONE", 10)  # the sampled cells (10 traces read) alone, the others together
        monkeypatch.setattr(shards, "TOGETHER", 20)
        monkeypatch.setattr(shards, "GROUP", 30)
    table = load_table()
    with Store(db) as store:
        store._run("DELETE FROM rollouts WHERE trace_id IN (SELECT trace_id FROM traces WHERE teacher = 'gpt-oss-20b')")
        store._run("DELETE FROM rollouts WHERE k = 0 AND trace_id IN (SELECT trace_id FROM traces WHERE teacher = "
                   "'qwen3-4b-thinking')")
        p = plan_benchmark(spec, store, table=table, sample=10, counter_for=_estimate)
        want = _per_shard(spec, store, 10, table)
    assert [replace(s, seconds=None) for s in p.shards] == want  # seconds: at the rates, after the shards
    counted = {s.prompt_tokens_counted for s in want}
    assert "estimate" in counted and any(c.startswith("scaled from 10 of") for c in counted)
    assert any(s.rollouts_cached for s in want) and any(not s.rollouts_cached for s in want)


def _teachers_spec(tmp_path: Path, files: dict[str, list[dict[str, Any]]], extra: str = "") -> BenchmarkSpec:
    """A spec whose teachers each have one trace file of these records, plus the demo's file
    selected for two of its models (a file shared by teachers, as the demo's)."""
    entries = []
    for name, records in files.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        entries.append(f"  - name: {name}\n    traces: [{name}.jsonl]\n")
    for name, model in (("llama", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B (GGUF q8_0)"),
                        ("oss", "openai/gpt-oss-120b")):
        entries.append(f"  - name: {name}\n    traces: [{DEMO_TRACES}]\n    select: \"{model}\"\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nstore: store.duckdb\nteachers:\n" + "".join(entries) + "datasets: [gsm8k]\n"
                    "students:\n  - name: s\n    backend: embedded\njudge: {name: lexical}\n" + extra, encoding="utf-8")
    return load_spec(spec)


def _records() -> list[dict[str, Any]]:
    return [json.loads(x) for x in DEMO_TRACES.read_text(encoding="utf-8").splitlines()]


def _tables(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """The rows ingest writes, less when they were written."""
    out = {}
    for t in ("problems", "traces", "grades", "unit_failures"):
        cols = [c for c, kind in store._run("SELECT column_name, data_type FROM information_schema.columns WHERE "
                                            "table_name = ? ORDER BY ordinal_position", [t]) if "TIMESTAMP" not in kind]
        out[t] = store._run(f"SELECT {', '.join(cols)} FROM {t} ORDER BY ALL")
    return out


def _one_by_one(tmp_path: Path, spec: BenchmarkSpec) -> dict[str, list[tuple[Any, ...]]] | str:
    with Store(tmp_path / "one.duckdb") as store:
        try:
            for t in spec.teachers:
                for path in t.traces:
                    ingest_spec_file(store, path, t.name, t.select, spec.ingest)
        except IngestError as e:
            return str(e)
        return _tables(store)


def _together(tmp_path: Path, spec: BenchmarkSpec) -> dict[str, list[tuple[Any, ...]]] | str:
    with Store(tmp_path / "together.duckdb") as store:
        try:
            plan_ingest.ingest_spec_files(store, spec.teachers, spec.ingest)
        except IngestError as e:
            return str(e)
        return _tables(store)


def test_files_ingested_together_store_what_one_by_one_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _records()
    a = [{**r, "model": "a"} for r in recs[:6]] + [{**recs[0], "model": "a"}]  # a repeated trace
    b = [{**r, "model": "b"} for r in recs[3:9]]  # problems shared with a
    spec = _teachers_spec(tmp_path, {"a": a, "b": b})
    want = _one_by_one(tmp_path, spec)

    def one_file(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a clean spec is ingested together, not file by file")

    monkeypatch.setattr(plan_ingest, "ingest_spec_file", one_file)
    got = _together(tmp_path, spec)
    assert isinstance(want, dict) and got == want and len(want["traces"]) == 6 + 6 + 2 * 16


@pytest.mark.parametrize("case", ["conflict", "bad line", "too large", "own ids"])
def test_what_could_differ_goes_file_by_file(tmp_path: Path, case: str) -> None:
    """A problem two files define differently, a bad line, a record over the size limit, an own
    trace id given to two traces: the files go one by one, with the same error or the same rows."""
    recs = _records()
    a = [{**r, "model": "a"} for r in recs[:4]]
    b = [{**r, "model": "b"} for r in recs[4:8]]
    extra = ""
    if case == "conflict":
        b[2] = {**b[2], "problem_id": a[1]["problem_id"], "problem": a[1]["problem"] + " (reworded)"}
    elif case == "bad line":
        b[1] = {k: v for k, v in b[1].items() if k != "reasoning"}
    elif case == "too large":
        limit = max(len(json.dumps(r).encode()) for r in recs)  # above every record of the files
        b[3] = {**b[3], "reasoning": b[3]["reasoning"] * (limit // len(b[3]["reasoning"]) + 1)}
        extra = f"ingest: {{max_trace_bytes: {limit}}}\n"
    else:
        a[0], b[0] = {**a[0], "trace_id": "mine"}, {**b[0], "trace_id": "mine"}
    spec = _teachers_spec(tmp_path, {"a": a, "b": b}, extra)
    want = _one_by_one(tmp_path, spec)
    assert _together(tmp_path, spec) == want
    if case == "too large":
        assert isinstance(want, dict) and len(want["unit_failures"]) == 1
    else:
        assert isinstance(want, str)  # an error naming file, line and field


def test_the_plan_of_a_spec_ingested_together(tmp_path: Path) -> None:
    """Through `scratch_plan`: the traces it counts new are the files' (the demo's own numbers are
    in tests/cli/test_plan.py)."""
    recs = _records()
    spec = _teachers_spec(tmp_path, {"a": [{**r, "model": "a"} for r in recs[:5]]})
    p = build.scratch_plan(spec, tmp_path / "none.duckdb", table=load_table(), counter_for=_estimate)
    assert p.traces_new == 5 + 2 * 16 and p.traces_stored == 0 and len(p.shards) == 3
