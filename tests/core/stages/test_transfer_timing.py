"""Issue 28: every committed transfer batch records its cost (`transfer_timings`), in the batch's
transaction, with the work the cost model counts from its completions."""

from __future__ import annotations

from pathlib import Path

from legival_core.backends.lazy import LazyBackend
from legival_core.run_config import student_config
from legival_core.stages.transfer import run_transfer
from legival_core.stages.transfer_timing import Timing
from legival_core.store import Store
from legival_core.transfer.cost import decode_context
from tests._sql import rows as sql
from tests.core.stages.test_transfer_stage import loaded, script  # noqa: F401  (the fixture)
from tests.plugins.scripted import ScriptedBackend


def test_each_committed_batch_stores_its_timing_row(loaded: Store) -> None:  # noqa: F811
    config = student_config(max_new_tokens=8, forcing_max_tokens=4)
    backend = LazyBackend(lambda: ScriptedBackend(script))
    timing = Timing("run-1", "transfer", "", engines=1)
    s = run_transfer(loaded, backend, config, traces_per_chunk=1, timing=timing)
    got = sql(loaded, "SELECT batch, source, accelerator, device, chunks, rollouts, forced, prefill, decode_steps, decode, "
                       "context, compute_s, load_s, load_started, shard_started, committed, teacher, dataset "
                       "FROM transfer_timings WHERE run_id = 'run-1' ORDER BY batch")
    assert [r[0] for r in got] == [0, 1] and s.batches == 2  # one per committed chunk (a trace each)
    # the scripted backend names no device: no accelerator either ("" = a GPU of unnamed kind)
    assert {(r[1], r[2], r[3], r[16], r[17]) for r in got} == {("transfer", "", "", "*", "*")}
    assert [r[4] for r in got] == [1, 1] and sum(r[5] for r in got) == s.rollouts_generated == 8
    assert sum(r[6] for r in got) == s.forced > 0
    assert sum(r[7] for r in got) == s.prefill_computed and sum(r[9] for r in got) == s.decode_tokens
    assert sum(r[8] for r in got) == s.decode_steps > 0 and sum(r[10] for r in got) == s.context > 0
    assert all(r[11] > 0 for r in got) and abs(sum(r[11] for r in got) - s.compute_s) < 1e-9
    # the model load is reported once, by the first chunk after it, and not counted as compute
    assert got[0][12] > 0 and got[1][12] == 0 and got[0][13] is not None and got[1][13] is None
    assert got[0][14] == got[1][14] <= got[0][15] <= got[1][15]  # shard start, then the commits
    # the context the rows hold is what their rollouts attended to
    stored = sql(loaded, "SELECT prompt_tokens, completion_tokens, forced FROM rollouts")
    first_pass = sum(decode_context(p, c) for p, c, forced in stored if not forced)
    assert s.context >= first_pass
    # nothing left to do: no batch, no row
    again = run_transfer(loaded, backend, config, traces_per_chunk=1, timing=Timing("run-2", "transfer", "cpu"))
    assert again.rollouts_generated == 0 and sql(loaded, "SELECT count(*) FROM transfer_timings "
                                                         "WHERE run_id = 'run-2'") == [(0,)]


def test_a_stage_without_timing_records_nothing(loaded: Store, tmp_path: Path) -> None:  # noqa: F811
    config = student_config(max_new_tokens=8, forcing_max_tokens=4)
    s = run_transfer(loaded, ScriptedBackend(script), config)
    assert s.rollouts_generated == 8 and s.compute_s > 0 and s.load_s == 0  # a given backend: no load
    assert sql(loaded, "SELECT count(*) FROM transfer_timings") == [(0,)]
