"""`ProcessExecutor` when a unit kills or hangs its process (issue 16): with `Work.isolate` the rest of
the chunk and every other chunk are computed, in order, and only that unit gets the failure results;
without it the run stops. Real spawned processes, a real `os._exit` and a real hang."""

from __future__ import annotations

import pytest

from legival_core.stages.base import ProcessExecutor, Work
from tests.core.stages import _process_units as pu

START_S = 5
"""Slack for a spawned worker to start (it imports one small module): a hang costs this plus its
limit, twice (its chunk, then itself alone)."""


def _run(units: list[str], **kw: object) -> list[list[str]]:
    work = Work(pu.setup, pu.process, chunk_size=2, **kw)  # type: ignore[arg-type]
    return list(ProcessExecutor(2, start_s=START_S).run(work, units))


def test_a_dying_and_a_hanging_unit_fail_alone() -> None:
    got = _run(["a", "b", "c", "die", "e", "f", "hang", "h", "i"], isolate=pu.isolate, unit_timeout_s=1.0)
    flat = [r for chunk in got for r in chunk]
    assert got[0] == ["A", "B"] and got[2] == ["E", "F"] and got[4] == ["I"]  # chunks in order
    assert flat[2] == "C" and flat[7] == "H"  # the failing unit's chunk mates are computed
    assert flat[3].startswith("failed die: its worker process died")
    assert flat[6] == "failed hang: timed out after 1 s (its worker process was stopped)"
    assert len(flat) == 9


def test_one_chunk_is_isolated_too() -> None:
    """Isolation needs a process even when there is one chunk (a rerun of just the bad trace)."""
    got = _run(["a", "die"], isolate=pu.isolate)
    assert got[0][0] == "A" and got[0][1].startswith("failed die: its worker process died") and len(got) == 1


def test_workers_that_cannot_start_stop_the_run_instead_of_failing_every_unit() -> None:
    work = Work(pu.broken_setup, pu.process, chunk_size=2, isolate=pu.isolate)
    with pytest.raises(RuntimeError, match="3 units in a row failed alone"):
        list(ProcessExecutor(2, start_s=START_S).run(work, ["a", "b", "c", "d"]))


def test_without_isolate_a_dying_unit_stops_the_run() -> None:
    from concurrent.futures.process import BrokenProcessPool

    with pytest.raises(BrokenProcessPool):
        _run(["a", "b", "die", "d", "e"])


def test_the_z3_stage_isolates_its_traces() -> None:
    """The Z3 group's work carries the isolation (error rows with the reason, every Z3 metric)."""
    from legival_core.quality.group import QualityConfig, QualityUnit, group_defs
    from legival_core.stages.quality import FailedUnit, QualityBatch

    g = group_defs(QualityConfig())["z3"]
    (batch,) = FailedUnit(g)(QualityUnit("t1", "gsm8k", "1 + 1 = 2", "", "q"), "timed out after 60 s")
    assert isinstance(batch, QualityBatch) and batch.trace_ids == ("t1",)
    assert [(r["metric"], r["status"], r["value"]) for r in batch.rows] == [(m, "error", None) for m in g.metrics]
    assert all("timed out after 60 s" in r["detail"] for r in batch.rows)
