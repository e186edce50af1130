"""Import trace files (JSONL or Parquet) into the store, re-grading every trace with our graders.

The whole file is read, validated and graded before the store is touched; then it is written in one
transaction. A bad line therefore either stops the import with an error naming file, line and field,
leaving the store exactly as it was, or (with `skip_bad`) is skipped and listed. Trace ids are
content hashes, so importing the same file twice adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from legival_core.datasets.base import get_dataset
from legival_core.registry import UnknownName, canonical_name
from legival_core.store import Store
from legival_core.thinking import split_thinking
from legival_core.types import Grade, Problem, Trace, canonical_json


class IngestError(ValueError):
    """A bad input line: names the file, the line (or Parquet row) and the field."""

    def __init__(self, file: str, line: int, field: str, message: str, unit: str = "line") -> None:
        self.file, self.line, self.field, self.message, self.unit = file, line, field, message, unit
        super().__init__(f"{file}:{line}: field '{field}': {message}" if unit == "line" else
                         f"{file} row {line}: field '{field}': {message}")


class TraceRecord(BaseModel):
    """One line of a trace file, in the schema of ../shared/data/reasoning_traces (and raw outputs).

    `reasoning` is the thinking section; when it is absent, `response` (or `output`) is taken as a
    raw model output and split at its thinking markers.
    """

    model_config = ConfigDict(extra="allow", str_strip_whitespace=False)

    teacher: str = Field(validation_alias=AliasChoices("teacher", "model"), min_length=1)
    dataset: str = Field(min_length=1)
    problem_id: str = Field(min_length=1)
    question: str = Field(validation_alias=AliasChoices("problem", "question"))
    gold: str = Field(validation_alias=AliasChoices("gold_answer", "gold"))
    reasoning: str | None = None
    response: str | None = Field(default=None, validation_alias=AliasChoices("response", "output", "raw_output"))
    correct: bool | None = None
    truncated: bool | None = None
    choices: list[str] | None = None

    @field_validator("problem_id", "gold", mode="before")
    @classmethod
    def _numbers_as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


@dataclass(frozen=True, slots=True)
class ParsedLine:
    line: int
    problem: Problem
    trace: Trace
    source_correct: bool | None


@dataclass(slots=True)
class IngestSummary:
    file: str
    lines: int = 0
    new_traces: int = 0
    already_stored: int = 0
    new_problems: int = 0
    bad_lines: list[str] = field(default_factory=list)
    disagreements: int = 0
    disagreement_examples: list[str] = field(default_factory=list)
    unparsed: int = 0
    timeouts: int = 0
    truncated: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "lines": self.lines,
            "new_traces": self.new_traces,
            "already_stored": self.already_stored,
            "new_problems": self.new_problems,
            "bad_lines": len(self.bad_lines),
            "label_disagreements": self.disagreements,
            "unparsed": self.unparsed,
            "grade_timeouts": self.timeouts,
            "truncated": self.truncated,
        }


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | IngestError]]:
    """(line number, record or the error for that line), for JSONL and Parquet files."""
    name = str(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, rec
        return
    data = path.read_bytes()
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield i, IngestError(name, i, "<encoding>", f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}")
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            yield i, IngestError(name, i, "<json>", f"malformed JSON: {e.msg} at column {e.colno}")
            continue
        if not isinstance(rec, dict):
            yield i, IngestError(name, i, "<json>", "each line must be a JSON object")
            continue
        yield i, rec


def parse_record(
    rec: dict[str, Any], file: str, line: int, teacher: str | None = None, unit: str = "line"
) -> ParsedLine:
    if teacher:
        rec = {**rec, "teacher": teacher}
    try:
        r = TraceRecord.model_validate(rec)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "<record>"
        if err["type"] == "missing":
            loc = {"teacher": "model", "question": "problem", "gold": "gold_answer"}.get(loc, loc)
            raise IngestError(file, line, loc, "required field is missing", unit) from None
        raise IngestError(file, line, loc, err["msg"], unit) from None
    try:
        dataset = canonical_name("dataset", r.dataset)
    except UnknownName as e:
        raise IngestError(file, line, "dataset", str(e), unit) from None
    if r.reasoning is not None:
        reasoning, answer_text, truncated = r.reasoning, r.response or "", bool(r.truncated)
    elif r.response is not None:
        split = split_thinking(r.response)
        reasoning, answer_text = split.reasoning, split.answer_text
        truncated = split.truncated or bool(r.truncated)
    else:
        raise IngestError(file, line, "reasoning", "required field is missing (or give a raw 'response')", unit)
    known = set(TraceRecord.model_fields) | {"model", "problem", "gold_answer", "output", "raw_output"}
    extra = {k: v for k, v in rec.items() if k not in known}
    provenance = canonical_json({"file": Path(file).name, "line": line, **extra})
    problem = Problem(dataset, r.problem_id, r.question, r.gold, tuple(r.choices or ()))
    trace = Trace(r.teacher, dataset, r.problem_id, reasoning, answer_text, truncated, provenance)
    return ParsedLine(line, problem, trace, r.correct)


def grade_trace(trace: Trace, problem: Problem) -> tuple[str, Grade]:
    """(grader key, grade) for a teacher trace. A truncated trace is never graded as if complete."""
    spec = get_dataset(trace.dataset)
    key = f"{spec.name}@{spec.grader_version}"
    if trace.truncated:
        return key, Grade(correct=False, extracted=None, status="truncated")
    return key, spec.grader(trace.answer_text, trace.reasoning, problem, "teacher")


def ingest_file(
    store: Store,
    path: str | Path,
    skip_bad: bool = False,
    teacher: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> IngestSummary:
    path = Path(path)
    name = str(path)
    if not path.exists():
        raise IngestError(name, 0, "<file>", "no such file")
    unit = "row" if path.suffix.lower() in (".parquet", ".pq") else "line"
    summary = IngestSummary(file=name)
    parsed: dict[str, ParsedLine] = {}
    for line, rec in read_records(path):
        summary.lines += 1
        try:
            if isinstance(rec, IngestError):
                raise rec
            p = parse_record(rec, name, line, teacher, unit)
        except IngestError as e:
            if not skip_bad:
                raise
            summary.bad_lines.append(str(e))
            continue
        parsed.setdefault(p.trace.trace_id, p)

    stored = store.existing_trace_ids(list(parsed))
    summary.already_stored = len(stored)
    fresh = [p for tid, p in parsed.items() if tid not in stored]
    problems, traces, grades = [], [], []
    for p in fresh:
        key, g = grade_trace(p.trace, p.problem)
        summary.unparsed += g.status == "unparsed"
        summary.timeouts += g.status == "timeout"
        summary.truncated += g.status == "truncated"
        if p.source_correct is not None and p.source_correct != g.correct and g.status != "truncated":
            summary.disagreements += 1
            if len(summary.disagreement_examples) < 20:
                summary.disagreement_examples.append(
                    f"line {p.line} ({p.trace.problem_id}): file says {p.source_correct}, "
                    f"we say {g.correct} (extracted {g.extracted!r})"
                )
        problems.append(_problem_row(p.problem))
        traces.append(_trace_row(p, name))
        grades.append({"trace_id": p.trace.trace_id, "grader": key, "extracted": g.extracted,
                       "correct": g.correct, "status": g.status, "groups_correct": g.groups_correct})
        if progress:
            progress(1)
    with store.transaction():
        summary.new_problems = store.insert_rows("problems", _dedupe(problems)).inserted
        summary.new_traces = store.insert_rows("traces", traces).inserted
        store.insert_rows("grades", grades)
    return summary


def _dedupe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        seen.setdefault((r["dataset"], r["problem_id"]), r)
    return list(seen.values())


def _problem_row(p: Problem) -> dict[str, Any]:
    return {"dataset": p.dataset, "problem_id": p.problem_id, "question": p.question, "gold": p.gold,
            "choices": json.dumps(list(p.choices)) if p.choices else None,
            "meta": canonical_json(dict(p.meta)) if p.meta else None}


def _trace_row(p: ParsedLine, file: str) -> dict[str, Any]:
    t = p.trace
    return {"trace_id": t.trace_id, "teacher": t.teacher, "dataset": t.dataset, "problem_id": t.problem_id,
            "reasoning": t.reasoning, "answer_text": t.answer_text, "truncated": t.truncated,
            "source_correct": p.source_correct, "source_file": Path(file).name, "source_line": p.line,
            "provenance": t.provenance}
