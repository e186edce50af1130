"""Group commit (`run_stage` with a stage's `commit_window_s`): batches that finish within the window
share a transaction, a slow batch commits alone, a failure commits what was held before it
propagates, and the store ends the same whichever way the rollouts were committed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from legival_core.spec import student_config
from legival_core.stages.base import InProcessExecutor, Plan, Work, run_stage
from legival_core.stages.ingest import ingest_file
from legival_core.stages.transfer import TransferStage
from legival_core.store import Store
from tests._sql import sql
from tests.plugins.scripted import ScriptedBackend

REASONING = ("Janet has 16 eggs. She eats 3. She bakes with 4. That leaves 9 eggs. "
             "Each sells for 2 dollars. So 9 times 2 is 18. The total is 18.")
TRACES = 6  # 4 depths each (K = {0, 3, 6, 7}): 24 rollouts in 6 chunks of one trace
CONFIG = student_config(name="scripted", backend="scripted", model="scripted-1", max_new_tokens=50)


def script(prompt: str) -> str:
    if prompt.endswith("\\boxed{"):
        return "18} done"
    return "Then the answer is \\boxed{18}" if "9 times 2" in prompt else "I am not sure"


@dataclass
class Counted:
    """The transfer stage with its commits counted (plan, run and commit are the stage's own)."""

    inner: TransferStage
    commits: list[int]

    name = "transfer"
    needs = ("grade", "segment")

    @property
    def requires(self) -> tuple[Any, ...]:
        return self.inner.requires

    @property
    def commit_window_s(self) -> float:
        return self.inner.commit_window_s

    def plan(self, store: Store) -> Plan[Any, Any]:
        return self.inner.plan(store)

    def run(self, units: Sequence[Any], executor: Any) -> Iterator[list[Any]]:
        return self.inner.run(units, executor)

    def commit(self, store: Store, results: Sequence[Any], plan: Plan[Any, Any]) -> int:
        self.commits.append(len(results))
        return self.inner.commit(store, results, plan)


class Paced(InProcessExecutor):
    """The in-process executor, sleeping `pause` s before each chunk and failing after `fail_after`."""

    def __init__(self, pause: float = 0.0, fail_after: int | None = None) -> None:
        super().__init__()
        self.pause, self.fail_after = pause, fail_after

    def run(self, work: Work[Any, Any, Any], units: Sequence[Any]) -> Iterator[list[Any]]:
        for i, batch in enumerate(super().run(work, units)):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("engine lost")
            time.sleep(self.pause)
            yield batch


def _store(path: Path, tmp: Path) -> Store:
    f = tmp / f"{path.stem}.jsonl"
    f.write_text("".join(json.dumps({
        "model": "t1", "dataset": "gsm8k", "problem_id": f"gsm8k-test-{i}", "problem": "How much?",
        "gold_answer": "18", "reasoning": REASONING, "response": "\\boxed{18}"}) + "\n" for i in range(TRACES)),
        encoding="utf-8")
    store = Store(path)
    ingest_file(store, f)
    return store


def _stage(window: float) -> Counted:
    return Counted(replace(TransferStage(CONFIG, traces_per_chunk=1, backend=ScriptedBackend(script)),
                           commit_window_s=window), [])


def _rows(store: Store) -> list[dict[str, Any]]:
    return sql(store, "SELECT trace_id, k, status, correct, forced, extracted, continuation FROM rollouts "
                      "ORDER BY trace_id, k").to_dicts()


def test_fast_batches_share_a_transaction_and_store_the_same_rows(tmp_path: Path) -> None:
    alone, grouped = _stage(0.0), _stage(60.0)
    with _store(tmp_path / "a.duckdb", tmp_path) as a, _store(tmp_path / "b.duckdb", tmp_path) as b:
        seen: list[tuple[int, int]] = []
        sa = run_stage(alone, a)
        sb = run_stage(grouped, b, None, lambda done, total: seen.append((done, total)))
        assert alone.commits == [1] * TRACES  # window 0: each chunk in its own transaction
        assert grouped.commits == [TRACES]  # all chunks finished within the window: one transaction
        assert sa.rollouts_generated == sb.rollouts_generated == 4 * TRACES
        assert seen == [(0, 4 * TRACES), (4 * TRACES, 4 * TRACES)]  # progress moves per commit
        assert _rows(a) == _rows(b) and len(_rows(a)) == 4 * TRACES


def test_a_batch_slower_than_the_window_commits_alone(tmp_path: Path) -> None:
    stage = _stage(0.05)
    with _store(tmp_path / "s.duckdb", tmp_path) as store:
        run_stage(stage, store, Paced(pause=0.2))
    assert stage.commits == [1] * TRACES


def test_a_failure_commits_what_was_held_then_propagates(tmp_path: Path) -> None:
    stage = _stage(60.0)
    with _store(tmp_path / "f.duckdb", tmp_path) as store:
        with pytest.raises(RuntimeError, match="engine lost"):
            run_stage(stage, store, Paced(fail_after=4))
        assert stage.commits == [4]  # the four finished chunks were held, then kept
        assert store.count("rollouts") == 16
        again = _stage(60.0)
        s = run_stage(again, store)  # the next plan lists only the two lost chunks
        assert (s.rollouts_cached, s.rollouts_generated) == (16, 8)
        assert again.commits == [2]
