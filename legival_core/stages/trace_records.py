"""Trace records: reading a trace file (JSONL or Parquet), validating each record, and the store rows.

The parsing half of the ingest stage (`legival_core.stages.ingest`), shared with the generate stage,
whose generated records go through exactly this parsing. Every error names the file, the line (or
Parquet row) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from legival_core.registry import UnknownName, canonical_name
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


_KNOWN_FIELDS = frozenset(TraceRecord.model_fields) | {"model", "problem", "gold_answer", "output", "raw_output"}


@dataclass(frozen=True, slots=True)
class ParsedLine:
    line: int
    problem: Problem
    trace: Trace
    source_correct: bool | None


def is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | IngestError]]:
    """(line number, record or the error for that line), for JSONL and Parquet files."""
    name = str(path)
    if is_parquet(path):
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


def numbered(records: Iterable[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any] | IngestError]]:
    """In-memory records numbered like the lines of the JSONL file that would hold them."""
    yield from enumerate(records, start=1)


def parse_record(
    rec: dict[str, Any], file: str, line: int, teacher: str | None = None, unit: str = "line"
) -> ParsedLine:
    """Validate one record into its problem and trace; IngestError names file, line and field."""
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
    extra = {k: v for k, v in rec.items() if k not in _KNOWN_FIELDS}
    provenance = canonical_json({"file": Path(file).name, "line": line, **extra})
    problem = Problem(dataset, r.problem_id, r.question, r.gold, tuple(r.choices or ()))
    trace = Trace(r.teacher, dataset, r.problem_id, reasoning, answer_text, truncated, provenance)
    return ParsedLine(line, problem, trace, r.correct)


# ------------------------------------------------------------------------------------------ rows


def problem_row(p: Problem) -> dict[str, Any]:
    return {"dataset": p.dataset, "problem_id": p.problem_id, "question": p.question, "gold": p.gold,
            "choices": json.dumps(list(p.choices)) if p.choices else None,
            "meta": canonical_json(dict(p.meta)) if p.meta else None}


def problem_of_row(dataset: str, problem_id: str, question: str, gold: str, choices: str | None,
                   meta: str | None) -> Problem:
    """The `Problem` a stored `problems` row holds (the inverse of `problem_row`)."""
    return Problem(dataset, problem_id, question, gold, tuple(json.loads(choices)) if choices else (),
                   tuple((str(k), str(v)) for k, v in json.loads(meta).items()) if meta else ())


def trace_row(p: ParsedLine, file: str) -> dict[str, Any]:
    t = p.trace
    return {"trace_id": t.trace_id, "teacher": t.teacher, "dataset": t.dataset, "problem_id": t.problem_id,
            "reasoning": t.reasoning, "answer_text": t.answer_text, "truncated": t.truncated,
            "source_correct": p.source_correct, "source_file": Path(file).name, "source_line": p.line,
            "provenance": t.provenance}


def grade_row(trace_id: str, grader: str, g: Grade) -> dict[str, Any]:
    return {"trace_id": trace_id, "grader": grader, "extracted": g.extracted, "correct": g.correct,
            "status": g.status, "groups_correct": g.groups_correct}


def dedupe_problems(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first row of each (dataset, problem_id)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        seen.setdefault((r["dataset"], r["problem_id"]), r)
    return list(seen.values())
