"""Per-unit fault isolation (legival_core/stages/isolation.py) on every executor of the core: a unit
that raises or runs past its limit fails alone, the machine's errors and broken workers are raised,
and `run_stage` stores failures, skips them next time and retries them when asked."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from legival_core.stages.base import InProcessExecutor, Plan, ProcessExecutor, Work, run_stage
from legival_core.stages.isolation import Isolation, UnitFailure, isolation, split_failures, unit_key
from legival_core.store import Store
from legival_core.store import failures as failure_rows
from tests.core.stages import _process_units as pu


def results(executor: Any, units: list[str], chunk: int = 3) -> tuple[list[str], list[UnitFailure]]:
    out: list[Any] = []
    for batch in executor.run(Work(pu.setup, pu.process_raising, chunk), units):
        out += batch
    return split_failures(out)


@pytest.mark.parametrize("executor", [InProcessExecutor(), ProcessExecutor(2)], ids=["in-process", "processes"])
def test_a_raising_unit_fails_alone_on_every_executor(executor: Any) -> None:
    ok, failed = results(executor, ["a", "bad", "c", "d", "e"])
    assert sorted(ok) == ["A", "C", "D", "E"]
    assert [(f.unit_key, f.reason) for f in failed] == [("h:" + unit_key("bad")[2:], "ValueError: cannot handle bad")]


def test_the_machines_errors_are_raised_not_stored() -> None:
    with pytest.raises(MemoryError):
        results(InProcessExecutor(), ["a", "oom", "c"])


def test_three_units_failing_in_a_row_with_no_success_is_a_broken_worker() -> None:
    with pytest.raises(RuntimeError, match="3 units in a row failed alone"):
        results(InProcessExecutor(), ["bad"] * 3, chunk=3)
    ok, failed = results(InProcessExecutor(), ["a", "bad", "bad", "bad"], chunk=4)  # one success: bad data
    assert ok == ["A"] and len(failed) == 3


@pytest.mark.timeout(120, method="thread")  # pytest-timeout's own SIGALRM timer would switch ours off
def test_a_unit_past_its_time_limit_fails_alone_on_the_main_thread() -> None:
    with isolation(Isolation(unit_timeout_s=0.3)):
        ok, failed = results(InProcessExecutor(), ["a", "spin", "c"])
    assert ok == ["A", "C"] and len(failed) == 1 and "time limit of 0.3 s" in failed[0].reason


@dataclass(frozen=True)
class Upper:
    """A stage over the store's `meta` table: one row per unit computed (a store is all it needs)."""

    units: tuple[str, ...]
    name: str = "upper-test"
    needs: tuple[str, ...] = ()

    def plan(self, store: Store) -> Plan[str, list[str]]:
        return Plan(list(self.units), [], total=len(self.units))

    def run(self, units: Sequence[str], executor: Any) -> Iterator[list[Any]]:
        return executor.run(Work(pu.setup, pu.process_raising, 2), units)

    def commit(self, store: Store, results: Sequence[str], plan: Plan[str, list[str]]) -> int:
        plan.summary.extend(results)
        return len(results)


def test_run_stage_stores_skips_and_retries_failures(tmp_path: Path) -> None:
    stage = Upper(("a", "bad", "c"))
    with Store(tmp_path / "s.duckdb") as store:
        with isolation(Isolation()) as first:
            assert sorted(run_stage(stage, store)) == ["A", "C"]
        (ledger,) = first.ledger
        assert (ledger.attempted, len(ledger.failed), ledger.skipped) == (3, 1, 0)
        assert list(failure_rows.failed_units(store, "upper-test")) == [unit_key("bad")]

        with isolation(Isolation()) as again:
            assert sorted(run_stage(stage, store)) == ["A", "C"]  # "bad" left out
        assert again.ledger[0].skipped == 1 and not again.ledger[0].failed

        fixed = Upper(("a", "b", "c"))  # other units: nothing skipped, the failure stays
        with isolation(Isolation(retry_failed=True)):
            run_stage(fixed, store)
        assert failure_rows.failed_units(store, "upper-test")
        with isolation(Isolation(retry_failed=True)) as retried:
            run_stage(stage, store)
        assert len(retried.ledger[0].failed) == 1  # retried, failed again: still stored
        assert failure_rows.failed_units(store, "upper-test")
