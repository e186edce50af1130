"""The registered stage as the one entry point: the registry's order is the run's, a need on a
missing stage or a circle is an error naming them, every registered stage keeps the protocol, and
the built-in jobs follow the spec's switches."""

from __future__ import annotations

import dataclasses

import pytest

from legival_core.run_config import load_spec
from legival_core.stages.base import required
from legival_core.stages.efficiency import SegmentStage
from legival_core.stages.registered import RunContext, StageInfo, in_needs_order, stages_in_order
from tests.conftest import REPO


def _info(name: str, needs: tuple[str, ...] = (), order: int = 100, requires: tuple[str, ...] = ()) -> StageInfo:
    return StageInfo(name, f"legival {name}", needs, requires, order=order)


def test_order_follows_needs_then_order_then_name() -> None:
    got = in_needs_order([_info("report", ("b", "a"), order=1), _info("b", ("a",), order=0), _info("a", order=5),
                          _info("c", order=5), _info("z", requires=("c",), order=0)])
    assert [i.name for i in got] == ["a", "b", "report", "c", "z"]


def test_a_missing_need_and_a_circle_are_errors_naming_the_stages() -> None:
    with pytest.raises(ValueError, match=r"stage 'x' needs unregistered stage\(s\) nope; registered: a, x"):
        in_needs_order([_info("a"), _info("x", ("nope", "a"))])
    with pytest.raises(ValueError, match="the stages b, c need each other in a circle"):
        in_needs_order([_info("a"), _info("b", ("c",)), _info("c", ("b", "a"))])


def test_the_builtin_order_is_the_runs() -> None:
    names = [i.name for i in stages_in_order()]
    assert names == ["ingest", "generate", "grade", "study", "segment", "efficiency", "transfer", "judge", "step_events", "quality",
                     "rewards", "monitor", "interventions", "hint_monitor", "report"]
    for i, info in enumerate(stages_in_order()):
        assert set(info.needs) <= set(names[:i]), info.name


def test_requires_resolve_through_names_and_aliases() -> None:
    for name in ("judge", "judge-batch", "judge-batches", "efficiency", "transfer"):
        assert [type(s) for s in required(name)] == [SegmentStage], name
    assert required("quality") == [] and required("not-a-stage") == []


def test_every_stage_object_keeps_the_protocol() -> None:
    """Frozen dataclasses: nothing set on `self` in `plan` for `run` or in `run` for `commit` (what a
    plan chose for the run travels in the plan: `ShardStage`'s chunk size is `Plan.chunk_size`)."""
    from legival_core.reports.stage import ReportStage
    from legival_core.stages.efficiency import EfficiencyStage
    from legival_core.stages.generate import GenerateStage
    from legival_core.stages.grade import GradeStage
    from legival_core.stages.ingest import IngestStage
    from legival_core.stages.judge import JudgeStage
    from legival_core.stages.judge_batch import BatchSubmitStage, ResumeBatchesStage
    from legival_core.stages.monitor import MonitorStage
    from legival_core.stages.quality import QualityStage
    from legival_core.stages.rewards import RewardsStage
    from legival_core.stages.transfer import TransferStage
    from legival_core.stages.transfer_shards import ShardStage

    for cls in (ReportStage, EfficiencyStage, SegmentStage, GenerateStage, GradeStage, IngestStage, JudgeStage,
                BatchSubmitStage, ResumeBatchesStage, MonitorStage, QualityStage, RewardsStage, TransferStage,
                ShardStage):
        params = getattr(cls, "__dataclass_params__", None)
        assert dataclasses.is_dataclass(cls) and params is not None and params.frozen, cls.__name__


def test_jobs_follow_the_specs_switches() -> None:
    demo = load_spec(REPO / "examples" / "demo.yaml")
    ctx = RunContext(demo)
    jobs = {i.name: [j.label for j in i.jobs(ctx)] for i in stages_in_order()}
    assert jobs["ingest"] == [f"ingest {t.name}" for t in demo.teachers]
    assert jobs["generate"] == [] and jobs["segment"] == [] and jobs["rewards"] == [] and jobs["monitor"] == []
    assert len(jobs["transfer"]) == len(demo.teachers) * len(demo.datasets) * len(demo.students)
    assert jobs["report"] == ["report"]
    one = RunContext(demo, (demo.teachers[0].name,))
    assert [j.label for j in stages_in_order()[0].jobs(one)] == [f"ingest {demo.teachers[0].name}"]
    off = demo.model_copy(update={"transfer": demo.transfer.model_copy(update={"enabled": False}),
                                  "judge": demo.judge.model_copy(update={"enabled": False})})
    off_jobs = {i.name: i.jobs(RunContext(off)) for i in stages_in_order()}
    assert off_jobs["transfer"] == [] and off_jobs["judge"] == []
    summaries = {i.name: i.summary([]) for i in stages_in_order()}  # no job: the keys a summary always has
    assert summaries["judge"] == {"judge_calls": 0} and summaries["transfer"]["rollouts_generated"] == 0
