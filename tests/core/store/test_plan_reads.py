"""Reads a resume plan makes per shard, made cheap at paper scale (benchmarks/scale.py (a)): the
"any trace without steps?" check answers from two counts when none is missing, the student is
registered once (later shards only read), and a trace's text is stored uncompressed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.run_config import student_config
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.base import run_stage
from legival_core.stages.efficiency import SegmentStage
from legival_core.stages.ingest import ingest_file
from legival_core.stages.transfer import TransferStage
from legival_core.store import Store
from legival_core.store import planner as reads
from tests._sql import rows as sql_rows


def _write(path: Path, pids: list[str]) -> Path:
    path.write_text("".join(json.dumps({
        "model": "t1", "dataset": "gsm8k", "problem_id": pid, "problem": "How much?", "gold_answer": "18",
        "reasoning": f"Problem {pid} starts here. Then 9 times 2 is 18. So it is 18.",
        "response": "\\boxed{18}"}) + "\n" for pid in pids), encoding="utf-8")
    return path


def _missing(store: Store) -> list[str]:
    return sorted(reads.traces_missing_steps(store, SEGMENTER_VERSION)["trace_id"].to_list())


def _counting(monkeypatch: pytest.MonkeyPatch, store: Store, method: str) -> list[str]:
    """Record each call of one of the store's methods (the real method still runs)."""
    calls: list[str] = []
    real = getattr(store, method)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[0]) if args else "")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, method, spy)
    return calls


def test_traces_missing_steps_before_and_after_segmenting_and_a_new_trace(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_file(store, _write(tmp_path / "a.jsonl", ["gsm8k-test-1", "gsm8k-test-2"]))
    first = _missing(store)
    assert len(first) == 2
    frame = reads.traces_missing_steps(store, SEGMENTER_VERSION)
    assert frame.columns == ["trace_id", "reasoning"] and all("9 times 2" in r for r in frame["reasoning"])
    run_stage(SegmentStage(), store)
    queries = _counting(monkeypatch, store, "_query")
    none = reads.traces_missing_steps(store, SEGMENTER_VERSION)
    assert none.height == 0 and none.columns == ["trace_id", "reasoning"]
    assert queries == []  # the counts agreed: no anti join ran
    monkeypatch.undo()
    assert reads.traces_missing_steps(store, "another-segmenter").height == 2  # counts per segmenter
    ingest_file(store, _write(tmp_path / "b.jsonl", ["gsm8k-test-3"]))
    (new,) = _missing(store)
    assert new not in first
    run_stage(SegmentStage(), store)
    assert _missing(store) == []


def test_the_student_is_registered_once_and_each_shard_plans_the_same(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_file(store, _write(tmp_path / "a.jsonl", ["gsm8k-test-1", "gsm8k-test-2"]))
    cfg = student_config(name="s", backend="scripted", model="scripted-1", max_new_tokens=50)
    assert not reads.student_stored(store, cfg.student_key)
    run_stage(SegmentStage(), store)
    stage = TransferStage(cfg, "t1", "gsm8k")
    first = stage.plan(store)
    assert reads.student_stored(store, cfg.student_key)
    assert sql_rows(store, "SELECT student_key, name, model FROM students") == [(cfg.student_key, "s", "scripted-1")]
    transactions = _counting(monkeypatch, store, "transaction")
    again = stage.plan(store)  # registered: a read, and the same plan
    assert transactions == []
    monkeypatch.undo()
    assert sql_rows(store, "SELECT count(*) FROM students") == [(1,)]
    assert [(t.trace_id, [p.k for p in ps]) for t, ps in again.units] == \
        [(t.trace_id, [p.k for p in ps]) for t, ps in first.units]
    assert first.total == again.total > 0


def test_reasoning_is_stored_uncompressed_and_reads_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    pids = [f"gsm8k-test-{i}" for i in range(1, 301)]
    with Store(path) as store:
        ingest_file(store, _write(tmp_path / "a.jsonl", pids))
    with Store(path) as store:  # reopened: the rows were checkpointed into the file
        kinds = {r[0] for r in sql_rows(store, "SELECT DISTINCT compression FROM pragma_storage_info('traces') "
                                                "WHERE column_name = 'reasoning' AND segment_type = 'VARCHAR'")}
        assert kinds == {"Uncompressed"}
        texts = sql_rows(store, "SELECT problem_id, reasoning FROM traces ORDER BY problem_id")
    assert {p: r for p, r in texts} == {p: f"Problem {p} starts here. Then 9 times 2 is 18. So it is 18." for p in pids}
