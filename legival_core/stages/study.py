"""The study stage (issue 42 part 5, docs/study.md "Analysis"): every answer of a human study graded by
the current grader of its trace's dataset, stored in `study_grades`.

A participant types a final answer, so the whole typed text is the answer. It is graded by
`grading.grader.grade_pred` with `pred_format="auto"` (the rule of `legival grade --pred-format`):
a single expression (`42`, `$42`, `\\frac{1}{2}`, `(C)`) is read as the answer itself, as the
content of a `\\boxed{}` (`AnswerGrader.grade_answer`); any other text ("the total is 42.") is read
as a finished student response, exactly as a rollout whose generation ended is graded (student role,
a trailing newline: `stages.transfer.grade_text`). `read_as` records which.

An answer without a grade by the current grader version (new, or graded by an older version) is
planned; a chunk's grades replace the older ones in one transaction. A store without a study plans
nothing. Which participants are excluded (failed attention checks) is derived by the report from
these grades, never stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.datasets.base import current_graders, get_dataset
from legival_core.grading.grader import grade_pred
from legival_core.readers.trace_records import problem_of_row
from legival_core.registry import is_registered
from legival_core.stages.base import Executor, Plan, StoreAccess, Work, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage, stage_jobs
from legival_core.store import Store, study_grades
from legival_core.store import planner as reads
from legival_core.store import study as study_rows
from legival_core.types import Grade, Problem


@dataclass(slots=True)
class StudyGradeSummary:
    missing: int = 0
    """Answers without a grade by the current grader when the stage planned."""
    graded: int = 0
    correct: int = 0
    unparsed: int = 0
    timeouts: int = 0
    read_as_answer: int = 0
    """Answers read as the bare answer (the rest as a response)."""
    studies: list[str] = field(default_factory=list)
    """The studies whose answers were graded."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StudyGradeUnit:
    study: str
    code: str
    item_id: str
    grader: str
    problem: Problem
    answer: str


def grade_typed_answer(problem: Problem, answer: str) -> tuple[Grade, str]:
    """(grade, how the text was read: 'answer' or 'response') of a participant's typed answer (module
    docstring: a single expression is the answer, other text a finished student response)."""
    spec = get_dataset(problem.dataset)
    g, read_as = grade_pred(spec.grader, answer.rstrip() + "\n", problem, "student", "auto")
    return g, read_as


@dataclass(frozen=True, slots=True)
class StudyGradeStage:
    """Grade the studies' answers that have no grade by the current grader of their dataset."""

    chunk: int = 500
    """Answers per chunk: the commit unit."""
    name: str = "study"
    study: str | None = None
    """Grade this study's answers only (None: every study's)."""

    def plan(self, store: Store) -> Plan[StudyGradeUnit, StudyGradeSummary]:
        s = StudyGradeSummary()
        if not study_rows.study_names(store):
            return Plan([], s, total=0)
        datasets = [d for d in reads.stored_datasets(store) if is_registered("dataset", d)]
        todo = study_grades.answers_to_grade(store, current_graders(datasets), self.study)
        units = [
            StudyGradeUnit(r["study"], r["code"], r["item_id"], r["grader"],
                           problem_of_row(r["dataset"], r["problem_id"], r["question"], r["gold"], r["choices"],
                                          r["meta"]), r["answer"])
            for r in todo.iter_rows(named=True)
        ]
        s.missing = len(units)
        s.studies = sorted({u.study for u in units})
        return Plan(units, s, total=len(units))

    def run(self, units: Sequence[StudyGradeUnit], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        return executor.run(Work(_no_worker, grade_answers, self.chunk), units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]], plan: Plan[Any, StudyGradeSummary]) -> int:
        study_grades.replace_study_grades(store, results)
        s = plan.summary
        for r in results:
            s.graded += 1
            s.correct += bool(r["correct"])
            s.unparsed += r["grade_status"] == "unparsed"
            s.timeouts += r["grade_status"] == "timeout"
            s.read_as_answer += r["read_as"] == "answer"
        return len(results)


def _no_worker() -> None:
    return None


def grade_answers(_w: None, units: Sequence[StudyGradeUnit]) -> list[dict[str, Any]]:
    """study_grades rows of a chunk of answers (pure: no store)."""
    out = []
    for u in units:
        g, read_as = grade_typed_answer(u.problem, u.answer)
        out.append({"study": u.study, "code": u.code, "item_id": u.item_id, "correct": bool(g.correct),
                    "extracted": g.extracted, "grade_status": g.status, "grader_version": u.grader,
                    "read_as": read_as})
    return out


def grade_studies(store: Store | StoreAccess, executor: Executor | None = None,
                  progress: Any = None, study: str | None = None) -> StudyGradeSummary:
    """`legival study grade --db [--name]`: grade every answer (of `study`, else of every study) that
    lacks a grade by its dataset's current grader."""
    return run_stage(StudyGradeStage(study=study), store, executor, progress)


def _study_jobs(ctx: RunContext) -> list[Job]:
    """One job when the run's store holds a study (cheap: it grades only new answers); none otherwise,
    so a benchmark without studies runs the same stages as before."""
    db = ctx.run.get("counts", {}).get("db") if isinstance(ctx.run.get("counts"), dict) else None
    if not study_rows.has_studies_at(str(db or ctx.spec.store)):
        return []
    return [stage_jobs("study", "study", [StudyGradeStage()])]


register_stage("study", "legival study grade --db DB", needs=("grade",), build=_study_jobs, order=35,
               description="grades of the human studies' answers by their dataset's grader (docs/study.md)")
