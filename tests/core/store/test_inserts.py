"""The store's idempotent inserts: a plain INSERT first (DuckDB 2 runs INSERT OR IGNORE as a scan of
every stored key), and on a stored key the transaction is replayed with conflicts ignored; the end
state and the counts are those of INSERT OR IGNORE in every case. Also the rollout maintenance
functions the scale benchmark uses (`sample_rollout_keys`, `delete_rollouts`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from legival_core.store import Store, writes
from legival_core.store import planner as reads
from tests._sql import rows as sql_rows


def _meta(store: Store) -> dict[str, str]:
    return {k: v for k, v in sql_rows(store, "SELECT key, value FROM meta WHERE key <> 'schema_version'")}


def _rows(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in pairs]


def test_new_rows_and_a_conflict_outside_a_transaction(store: Store) -> None:
    assert store.insert_rows("meta", _rows(("a", "1"), ("b", "2"))).inserted == 2
    c = store.insert_rows("meta", _rows(("a", "changed"), ("c", "3")))
    assert (c.offered, c.inserted) == (2, 1)
    assert _meta(store) == {"a": "1", "b": "2", "c": "3"}


def test_a_conflict_inside_a_transaction_keeps_its_earlier_inserts(store: Store) -> None:
    store.insert_rows("meta", _rows(("a", "1")))
    with store.transaction():
        first = store.insert_rows("meta", _rows(("b", "2"), ("c", "3")))
        second = store.insert_rows("meta", _rows(("a", "other"), ("d", "4")))
        third = store.insert_rows("meta", _rows(("d", "again"), ("e", "5")))
    assert [x.inserted for x in (first, second, third)] == [2, 1, 1]
    assert _meta(store) == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}


def test_repeated_keys_within_one_batch(store: Store) -> None:
    with store.transaction():
        c = store.insert_rows("meta", _rows(("a", "1"), ("a", "2"), ("b", "3")))
    assert c.inserted == 2
    assert set(_meta(store)) == {"a", "b"}


def test_a_failure_after_a_conflict_rolls_everything_back(store: Store) -> None:
    store.insert_rows("meta", _rows(("a", "1")))
    with pytest.raises(RuntimeError), store.transaction():
        store.insert_rows("meta", _rows(("b", "2")))
        store.insert_rows("meta", _rows(("a", "x"), ("c", "3")))
        raise RuntimeError("boom")
    assert _meta(store) == {"a": "1"}


def test_a_transaction_with_another_write_ignores_conflicts_directly(store: Store) -> None:
    store.insert_rows("meta", _rows(("a", "1"), ("b", "2")))
    with store.transaction():
        sql_rows(store, "DELETE FROM meta WHERE key = 'b'")
        c = store.insert_rows("meta", _rows(("a", "x"), ("c", "3")))
    assert c.inserted == 1
    assert _meta(store) == {"a": "1", "c": "3"}


def _rollout(trace: str, student: str, k: int) -> dict[str, object]:
    return {"trace_id": trace, "student_key": student, "k": k, "sample": 0, "m": 9, "bin": k, "status": "ok",
            "correct": True, "forced": False}


def test_sampled_rollout_keys_are_deterministic_and_deleted_exactly(tmp_path: Path) -> None:
    with Store(tmp_path / "r.duckdb") as store:
        rows = [_rollout(f"t{i}", s, k) for i in range(50) for s in ("s1", "s2") for k in range(10)]
        writes.add(store, "rollouts", rows)
        a = reads.sample_rollout_keys(store, 0.1, seed=3)
        b = reads.sample_rollout_keys(store, 0.1, seed=3)
        assert a.equals(b) and 40 <= a.height <= 160
        assert not a.equals(reads.sample_rollout_keys(store, 0.1, seed=4))
        assert writes.delete_rollouts(store, a) == a.height
        assert store.count("rollouts") == len(rows) - a.height
        gone = set(zip(a["trace_id"], a["student_key"], a["k"], strict=True))
        left = {(t, s, k) for t, s, k in sql_rows(store, "SELECT trace_id, student_key, k FROM rollouts")}
        assert not gone & left and len(gone | left) == len(rows)
        # the deleted rows go back in (a resumed run commits them), the others are left alone
        assert store.insert_rows("rollouts", rows).inserted == a.height
