"""The benchmark spec: one YAML file that says what `legival run` computes (issue 4).

Validated by pydantic at the boundary, with messages that say what to fix: an unknown key names the
allowed keys, a choice names the registered values, and every message carries the dotted location of
the offending field (`teachers.2.traces`). Relative paths resolve against the spec file's folder, so
a spec and its data can move together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from legival_core.run_config.analyses import Monitor, Rewards, SupervisorModel
from legival_core.run_config.base import (
    SpecError,
    Strict,
    format_errors,
    read_yaml,
    registered_name,
    resolve_path,
)
from legival_core.run_config.monitorability import Monitorability
from legival_core.run_config.sections import Efficiency, Execution, Ingest, Judge, Quality, Report, Transfer
from legival_core.run_config.students import Student, early_readers
from legival_core.run_config.teachers import Teacher
from legival_core.transfer.rollout_plan import StudentConfig


class BenchmarkSpec(Strict):
    name: str = "legival"
    store: Path = Path("legival.duckdb")
    teachers: list[Teacher] = Field(min_length=1)
    datasets: list[str] = Field(min_length=1)
    students: list[Student] = Field(default_factory=lambda: [Student()])
    ingest: Ingest = Ingest()
    efficiency: Efficiency = Efficiency()
    transfer: Transfer = Transfer()
    judge: Judge = Judge()
    quality: Quality = Quality()
    rewards: Rewards = Field(default_factory=Rewards)
    monitor: Monitor = Field(default_factory=Monitor)
    monitorability: Monitorability = Field(default_factory=Monitorability)
    report: Report = Report()
    execution: Execution = Execution()

    @field_validator("store")
    @classmethod
    def _store(cls, v: Path, info: ValidationInfo) -> Path:
        return resolve_path(v, info)

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str]) -> list[str]:
        return [registered_name("dataset", d) for d in v]

    @model_validator(mode="after")
    def _monitorability(self) -> BenchmarkSpec:
        """Hint interventions need generating teachers and datasets with a wrong-answer rule."""
        m = self.monitorability
        if not m.enabled:
            return self
        from legival_core.datasets.base import get_dataset

        names = {t.name: t for t in self.teachers}
        chosen = m.teachers if m.teachers is not None else [t.name for t in self.teachers if t.generate is not None]
        for n in chosen:
            if n not in names:
                raise ValueError(f"monitorability.teachers: no teacher {n!r} (teachers: {', '.join(names)})")
            if names[n].generate is None:
                raise ValueError(f"monitorability.teachers: teacher {n!r} has no `generate:` (hint interventions "
                                 "sample the teacher's model)")
        if not chosen:
            raise ValueError("monitorability: no teacher generates (give a teacher `generate:`)")
        for d in self.datasets:
            if get_dataset(d).wrong_answer is None:
                raise ValueError(f"monitorability: dataset {d!r} has no wrong-answer rule (DatasetSpec.wrong_answer), "
                                 "so a hint has no target; leave it out of the spec's datasets or turn monitorability off")
        return self

    @model_validator(mode="after")
    def _unique(self) -> BenchmarkSpec:
        for what, names in (("teacher", [t.name for t in self.teachers]), ("student", [s.name for s in self.students])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"duplicate {what} name(s): {', '.join(dup)}")
        known = [t.name for t in self.teachers]
        for st in self.students:
            unknown = [n for n in st.teachers or [] if n not in known]
            if unknown:
                raise ValueError(f"student {st.name!r}: teachers: no teacher {', '.join(map(repr, unknown))} "
                                 f"(teachers: {', '.join(known)})")
        for t in self.teachers:
            g = t.generate
            if g is None or g.problems is None:
                continue
            try:
                jobs = g.jobs(self.datasets, t.name)
            except SpecError as e:
                raise ValueError(str(e)) from None
            outside = [d for d, _ in jobs if d not in self.datasets]
            if outside:
                raise ValueError(f"teacher {t.name!r} generates on {', '.join(outside)}, which is not in "
                                 f"`datasets` ({', '.join(self.datasets)})")
        return self

    def generating_teachers(self, names: list[str] | None = None) -> list[Teacher]:
        """The teachers with `generate` (of `names`, when given); SpecError for a named teacher without it."""
        if not names:
            return [t for t in self.teachers if t.generate is not None]
        chosen = [self.teacher(n) for n in names]
        plain = [t.name for t in chosen if t.generate is None]
        if plain:
            raise SpecError(f"teacher(s) {', '.join(plain)} have trace files, not `generate`; "
                            "`legival ingest`/`legival run` stores them")
        return chosen

    def teacher(self, name: str) -> Teacher:
        for t in self.teachers:
            if t.name == name:
                return t
        raise SpecError(f"no teacher {name!r} in the spec; teachers: {', '.join(t.name for t in self.teachers)}")

    def student_config(self, student: Student) -> StudentConfig:
        return student.config(self.transfer)

    def transfer_students(self) -> list[Student]:
        """The students the transfer stage runs, in order: `students`, then with
        `transfer.early_answering` each generating teacher's own early-answer reader (`early_readers`)."""
        if not self.transfer.early_answering:
            return list(self.students)
        return [*self.students, *early_readers(self.teachers, self.students)[0]]

    def early_answering_skipped(self) -> dict[str, str]:
        """With `transfer.early_answering`: the teachers without an early-answer reader, and why."""
        if not self.transfer.early_answering:
            return {}
        readers = {t for st in self.students if st.mode == "early_answer" for t in (st.teachers or [])}
        return {t: why for t, why in early_readers(self.teachers, self.students)[1].items() if t not in readers}

    def supervisor(self) -> SupervisorModel:
        """The monitor's supervisor: a spec student by name, or a model on `monitor.backend`."""
        return self.monitor.resolve(self.students)


def parse_spec(data: Any, base_dir: str | Path | None = None, source: str = "spec", check_files: bool = True) -> BenchmarkSpec:
    """Validate a spec mapping; `base_dir` anchors relative paths. Raises SpecError."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the top level must be a mapping of keys (teachers, datasets, ...)")
    ctx = {"base_dir": str(base_dir) if base_dir is not None else None, "check_files": check_files}
    try:
        return BenchmarkSpec.model_validate(data, context=ctx)
    except ValidationError as e:
        raise SpecError(format_errors(e, source)) from None


def load_spec(path: str | Path, check_files: bool = True) -> BenchmarkSpec:
    path = Path(path)
    return parse_spec(read_yaml(path, "spec"), path.resolve().parent, str(path), check_files)
