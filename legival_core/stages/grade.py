"""The grade stage: every stored trace graded by the CURRENT grader of its dataset.

Grades are stored under `<dataset>@<grader_version>` (`grader_key`), so a grader version bump leaves
the old grades in place and makes every trace of that dataset "missing" a grade: `legival grade --db`
(this stage) grades them, without re-ingesting anything. Ingest and generate grade the traces they
store with the same function (`grade_teacher`), in the same transaction as the traces.

A truncated trace is never graded as if complete: its grade is status 'truncated', incorrect.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.datasets.base import current_graders, get_dataset, grader_key
from legival_core.readers.trace_records import grade_row, problem_of_row
from legival_core.registry import is_registered
from legival_core.stages.base import Executor, Plan, StoreAccess, Work, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage, stage_jobs
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import Grade, Problem


def grade_teacher(problem: Problem, reasoning: str, answer_text: str, truncated: bool) -> tuple[str, Grade]:
    """(grader key, grade) of a teacher trace on `problem` by the current grader of its dataset."""
    spec = get_dataset(problem.dataset)
    key = grader_key(spec.name)
    if truncated:
        return key, Grade(correct=False, extracted=None, status="truncated")
    return key, spec.grader(answer_text, reasoning, problem, "teacher")


@dataclass(slots=True)
class GradeSummary:
    missing: int = 0
    """Traces without a grade by their dataset's current grader when the stage planned."""
    graded: int = 0
    correct: int = 0
    unparsed: int = 0
    timeouts: int = 0
    truncated: int = 0
    graders: dict[str, int] = field(default_factory=dict)
    """Grades written per grader key."""
    unknown_datasets: list[str] = field(default_factory=list)
    """Stored datasets with no registered grader (e.g. a plugin not loaded): their traces are skipped."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GradeUnit:
    trace_id: str
    grader: str
    problem: Problem
    reasoning: str
    answer_text: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class GradeStage:
    """Grade the stored traces that have no grade by the current grader of their dataset."""

    chunk: int = 500
    """Traces per chunk: the commit unit (a crash loses at most one chunk)."""
    name: str = "grade"

    def plan(self, store: Store) -> Plan[GradeUnit, GradeSummary]:
        s = GradeSummary()
        datasets = reads.stored_datasets(store)
        s.unknown_datasets = [d for d in datasets if not is_registered("dataset", d)]
        todo = reads.traces_missing_grades(store, current_graders([d for d in datasets if d not in s.unknown_datasets]))
        units = [
            GradeUnit(r["trace_id"], r["grader"],
                      problem_of_row(r["dataset"], r["problem_id"], r["question"], r["gold"], r["choices"], r["meta"]),
                      r["reasoning"], r["answer_text"], bool(r["truncated"]))
            for r in todo.iter_rows(named=True)
        ]
        s.missing = len(units)
        return Plan(units, s, total=len(units))

    def run(self, units: Sequence[GradeUnit], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        return executor.run(Work(_no_worker, grade_units, self.chunk), units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]], plan: Plan[Any, GradeSummary]) -> int:
        with store.transaction():
            store.insert_rows("grades", results)
        s = plan.summary
        for r in results:
            s.graded += 1
            s.correct += bool(r["correct"])
            s.unparsed += r["status"] == "unparsed"
            s.timeouts += r["status"] == "timeout"
            s.truncated += r["status"] == "truncated"
            s.graders[r["grader"]] = s.graders.get(r["grader"], 0) + 1
        return len(results)


def _no_worker() -> None:
    return None


def grade_units(_w: None, units: Sequence[GradeUnit]) -> list[dict[str, Any]]:
    """Grade rows of a chunk of traces (pure: no store). The key is the one the plan asked for."""
    out = []
    for u in units:
        key, g = grade_teacher(u.problem, u.reasoning, u.answer_text, u.truncated)
        if key != u.grader:
            raise RuntimeError(f"grader of {u.problem.dataset} changed during the run ({u.grader} -> {key})")
        out.append(grade_row(u.trace_id, key, g))
    return out


def grade_store(store: Store | StoreAccess, executor: Executor | None = None, progress: Any = None) -> GradeSummary:
    """`legival grade --db`: grade every trace that lacks a grade by its dataset's current grader."""
    return run_stage(GradeStage(), store, executor, progress)


def _grade_jobs(_ctx: RunContext) -> list[Job]:
    """A run grades what the current graders have not (new traces were graded when stored)."""
    return [stage_jobs("grade", "grade", [GradeStage()])]


def _regraded(results: list[Any]) -> dict[str, Any]:
    return {"regraded": sum(r.graded for r in results)}


register_stage("grade", "legival grade --db DB", needs=("ingest", "generate"), build=_grade_jobs, summarize=_regraded,
               order=30, description="grades of every trace by its dataset's current grader")
