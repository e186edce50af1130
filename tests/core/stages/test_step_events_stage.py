"""The step_events stage on a small real store (issue 41): events stored for every (trace, student) pair with
rollouts, a rerun plans nothing, and a new rollout or a new judge result replans exactly the pairs
whose inputs changed."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from legival_core.run_config import load_spec
from legival_core.stages.base import run_stage
from legival_core.stages.registered import RunContext, stage_info, stages_in_order
from legival_core.stages.step_events import StepEventsStage
from legival_core.store import Store
from legival_core.store import step_events as step_rows
from legival_core.transfer.step_events import CODE_VERSION
from tests.conftest import REPO
from tests.synthetic import fill_synthetic


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "steps.duckdb"
    with Store(path) as s:
        fill_synthetic(s, teachers=("alpha", "beta"), datasets=("gsm8k",), students=("student-a", "student-b"),
                       traces_per_cell=12, m_range=(2, 14), seed=4)
        s.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": f"p{i:05d}", "question": "q", "gold": "1"}
                                   for i in range(12)])
    return path


def _planned(s: Store) -> list[tuple[str, str]]:
    return sorted((u.trace_id, st) for u in StepEventsStage().plan(s).units for st in u.students)


def _observed_depths(s: Store) -> pl.DataFrame:
    return s._query("SELECT trace_id, student_key, count(DISTINCT k) FILTER (WHERE status = 'ok') AS n "
                    "FROM rollouts GROUP BY ALL")


def test_events_are_stored_and_a_rerun_plans_nothing(db: Path) -> None:
    with Store(db) as s:
        summary = run_stage(StepEventsStage(), s)
        events = step_rows.step_events(s)
        depths = _observed_depths(s)
        assert summary.pairs == depths.filter(pl.col("n") >= 2).height > 20
        assert summary.events == events.height
        # one event per pair of consecutive observed depths
        per_pair = events.group_by("trace_id", "student").len()
        want = depths.filter(pl.col("n") >= 2).with_columns((pl.col("n") - 1).alias("len"),
                                                            pl.col("student_key").str.strip_prefix("key-").alias("student"))
        assert per_pair.sort("trace_id", "student").rows() == want.select("trace_id", "student", "len").cast(
            {"len": pl.UInt32}).sort("trace_id", "student").rows()
        assert set(events["student"]) == {"student-a", "student-b"}
        assert set(step_rows.trace_events(s, events["trace_id"].to_list())["code_version"]) == {CODE_VERSION}
        assert set(events["backtracking_method"]) == {"lexical"}  # the lexical rows, no judge yet
        assert events["max_cos"].null_count() < events.height and events["tokens_added"].null_count() == 0
        stored = s._query("SELECT DISTINCT trace_id, student_key, inputs_key FROM step_events")
        assert stored.height == summary.pairs  # one inputs key per pair

        again = StepEventsStage().plan(s)
        assert again.units == [] and again.done == again.total == events["trace_id"].n_unique()
        assert run_stage(StepEventsStage(), s).events == 0


def test_a_new_rollout_or_judge_result_replans_exactly_what_changed(db: Path) -> None:
    with Store(db) as s:
        run_stage(StepEventsStage(), s)
        before = step_rows.step_events(s)
        pair = step_rows.trace_events(s, before["trace_id"].to_list()[:1]).select("trace_id", "student_key").row(0)
        depth = s._query("SELECT * FROM rollouts WHERE trace_id = ? AND student_key = ? ORDER BY k LIMIT 1", list(pair))
        s.insert_arrow("rollouts", depth.with_columns(pl.lit(1, pl.Int32).alias("sample"),
                                                      pl.lit(True).alias("correct")).to_arrow())
        assert _planned(s) == [pair]  # the other student of the same trace kept its inputs

        run_stage(StepEventsStage(), s)
        assert _planned(s) == []
        after = step_rows.step_events(s)
        assert after.height == before.height  # a second sample at a depth: the same segments, y may move
        others = pl.col("trace_id") != pair[0]
        order = ["trace_id", "student", "k_start"]
        assert after.filter(others).sort(order).equals(before.filter(others).sort(order))

        other = before.filter(pl.col("trace_id") != pair[0])["trace_id"][0]
        m = s._query("SELECT m FROM step_counts WHERE trace_id = ?", [other])["m"][0]
        s.insert_rows("judge_results", [{"trace_id": other, "judge_key": "jk", "judge": "scripted", "model": "judge-1",
                                         "prompt_version": "1", "status": "ok", "m": m, "flagged_steps": "[1]",
                                         "fraction": 1 / m}])
        students = sorted(step_rows.trace_events(s, [other])["student_key"].unique())
        assert _planned(s) == [(other, st) for st in students]  # every student of that trace, nothing else
        run_stage(StepEventsStage(), s)
        judged = step_rows.trace_events(s, [other])
        assert set(judged["backtracking_method"]) == {"judge:scripted/judge-1"}
        assert judged.filter(pl.col("k_start") == 0)["backtracking"].all()  # step 1 is in every (0, k] segment


def test_a_pair_that_lost_its_depths_loses_its_events(db: Path) -> None:
    from legival_core.store import writes

    with Store(db) as s:
        run_stage(StepEventsStage(), s)
        first = step_rows.step_events(s)["trace_id"][0]
        pair = step_rows.trace_events(s, [first]).select("trace_id", "student_key").row(0)
        gone = s._query("SELECT trace_id, student_key, k, sample FROM rollouts WHERE trace_id = ? AND student_key = ? "
                        "AND k > 0", list(pair))
        writes.delete_rollouts(s, gone.to_arrow())
        assert _planned(s) == [pair]  # one observed depth left: no segment
        run_stage(StepEventsStage(), s)
        assert step_rows.trace_events(s, [pair[0]]).filter(pl.col("student_key") == pair[1]).height == 0
        assert _planned(s) == []

        other = step_rows.trace_events(s, [step_rows.step_events(s)["trace_id"][0]]).select(
            "trace_id", "student_key").row(0)
        writes.delete_rollouts(s, s._query("SELECT trace_id, student_key, k, sample FROM rollouts WHERE trace_id = ? "
                                           "AND student_key = ?", list(other)).to_arrow())
        assert _planned(s) == [other]  # no rollout left at all
        run_stage(StepEventsStage(), s)
        assert step_rows.trace_events(s, [other[0]]).filter(pl.col("student_key") == other[1]).height == 0
        assert _planned(s) == []


def test_a_plans_scratch_copy_keeps_the_events(db: Path) -> None:
    """`legival plan` plans on a scratch copy of the store (`store.scratch`): the copy holds the events
    and their keys, so the stage plans there what it would plan on the store itself."""
    from legival_core.store.scratch import scratch_copy

    with Store(db) as s:
        run_stage(StepEventsStage(), s)
        n = step_rows.stored_pairs(s)
    scratch = scratch_copy(db)
    try:
        assert step_rows.stored_pairs(scratch) == n > 0
        assert StepEventsStage().plan(scratch).units == []
    finally:
        scratch.close()


def test_reads_of_a_store_without_the_table(tmp_path: Path) -> None:
    """A store written before the table existed, opened read-only, lacks it: the reads give the empty
    frame with the same columns, and the plan runs."""
    import duckdb

    path = tmp_path / "old.duckdb"
    with Store(path) as s:
        fill_synthetic(s, teachers=("alpha",), datasets=("gsm8k",), students=("student-a",), traces_per_cell=3)
    with duckdb.connect(str(path)) as con:
        con.execute("DROP TABLE step_events")
    with Store(path, read_only=True) as s:
        assert not s.has_table("step_events")
        empty = step_rows.step_events(s)
        assert empty.height == 0 and "outcome" in empty.columns
        assert step_rows.trace_events(s, ["alpha|gsm8k|p00000"]).columns == [*empty.columns, "student_key",
                                                                              "code_version"]
        assert StepEventsStage().plan(s).units  # every pair is to compute


def test_the_stage_is_registered_after_what_it_reads() -> None:
    info = stage_info("step_events")
    assert info.command == "legival step-events --db DB" and info.requires == ("segment",)
    names = [i.name for i in stages_in_order()]
    assert all(names.index(n) < names.index("step_events") for n in ("transfer", "efficiency", "judge"))
    demo = load_spec(REPO / "examples" / "demo.yaml")
    assert [j.label for j in info.jobs(RunContext(demo))] == ["step_events"]
    off = demo.model_copy(update={"transfer": demo.transfer.model_copy(update={"enabled": False})})
    assert info.jobs(RunContext(off)) == []


def test_the_events_say_whether_their_r_i_were_stored(tmp_path: Path) -> None:
    """`similarity`: true where the trace's r_i are stored for the stage's embedding model, false where
    not (the efficiency stage never ran, or ran with another model): what `redundant`'s status reads."""
    from legival_core.run_config import Efficiency
    from tests.cli.test_step_events_command import build_store

    for efficiency, model, want in ((True, None, {True}), (False, None, {False}), (True, "other-model", {False})):
        path = tmp_path / f"{efficiency}-{model}.duckdb"
        build_store(path, efficiency=efficiency)
        with Store(path) as s:
            run_stage(StepEventsStage(Efficiency(model=model) if model else Efficiency()), s)
            events = step_rows.step_events(s, CODE_VERSION)
        assert events.height and set(events["similarity"]) == want, (efficiency, model)
        if want == {False}:
            assert events["max_cos"].null_count() == events.height


def test_a_store_whose_step_events_predate_the_similarity_column(tmp_path: Path) -> None:
    """A store written before `similarity` existed: read-only, its events read with a null `similarity`
    (no SQL error); its next writable open adds the column (schema.py's ALTER) and the version-1 rows
    are recomputed by the next steps run."""
    from tests.cli.test_step_events_command import build_store

    path = tmp_path / "old.duckdb"
    build_store(path)
    with Store(path) as s:
        run_stage(StepEventsStage(), s)
        s._run("UPDATE step_events SET code_version = '1', inputs_key = 'salted with steps-1'")
        s._run("ALTER TABLE step_events DROP COLUMN similarity")  # the table as the old DDL made it
    with Store(path, read_only=True) as s:
        old = step_rows.step_events(s)
        assert old.height and old["similarity"].null_count() == old.height
        assert step_rows.step_events(s, CODE_VERSION).height == 0  # readers keep the current version only
    with Store(path) as s:
        assert "similarity" in s._query("SELECT * FROM step_events LIMIT 0").columns
        run_stage(StepEventsStage(), s)
        new = step_rows.step_events(s)
    assert new.height == old.height and set(new["similarity"]) == {True}
