"""Trace records: reading a trace file (JSONL, plain or gzip/zstd-compressed, or Parquet), validating
each record, and the store rows.

The parsing half of the ingest stage (`legival_core.stages.ingest`), shared with the generate stage,
whose generated records go through exactly this parsing. Every error names the file, the line (or
Parquet row) and the field. What a file is comes from its first bytes (`input_files.open_input`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from legival_core.readers.input_files import InputFile, InputFileError, is_parquet_name, open_input
from legival_core.readers.records import LineProblem, jsonl_lines
from legival_core.registry import UnknownName, canonical_name
from legival_core.thinking import split_thinking
from legival_core.types import Grade, Problem, Trace, canonical_json


class IngestError(ValueError):
    """A bad input line: names the file, the line (or Parquet row, or a source's sample: `unit`) and the
    field."""

    def __init__(self, file: str, line: int, field: str, message: str, unit: str = "line") -> None:
        self.file, self.line, self.field, self.message, self.unit = file, line, field, message, unit
        if unit == "file":  # the whole file is unusable (missing, a directory, not Parquet): no line
            super().__init__(f"{file}: {message}")
        else:
            super().__init__(f"{file}:{line}: field '{field}': {message}" if unit == "line" else
                             f"{file} {unit} {line}: field '{field}': {message}")


MAX_TRACE_BYTES = 2_000_000
"""The spec's default `ingest.max_trace_bytes` (`legival_core.run_config.Ingest` reads it from here)."""


class Limits(Protocol):
    """The input boundary's limits (the spec's `ingest:` section is one)."""

    @property
    def max_trace_bytes(self) -> int: ...

    @property
    def repair_text(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class BoundaryLimits:
    max_trace_bytes: int = MAX_TRACE_BYTES
    repair_text: bool = False


DEFAULT_LIMITS = BoundaryLimits()


class TraceTooLarge(IngestError):
    """A record over `ingest.max_trace_bytes`: skipped and counted, never stored (not a bad line)."""


class SkippedUnit(IngestError):
    """A unit the source itself says holds no trace (an OpenAI batch request that failed): skipped and
    counted with its reason, never stored and not a bad line (no `--skip-bad` needed)."""


def file_error(file: str, message: str) -> IngestError:
    """An error about the whole file (it cannot be read at all), not one of its lines."""
    return IngestError(file, 0, "<file>", message, unit="file")


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
    fields: tuple[str, str] = ("problem", "gold_answer")
    """The record's own names of the question and gold fields (errors name the field as written)."""
    own_id: str | None = None
    """The record's own `trace_id` field, when it carries one (it must name one trace only)."""
    repaired: bool = False
    """Invalid Unicode in the record was replaced by U+FFFD (`ingest.repair_text`)."""
    unit_key: tuple[str, str] | None = None
    """(field, what it says) of the unit of its input the record is (an OpenAI request's `custom_id 'r-1'`,
    `sources.SourceInfo.key`): one input may not give two traces for one unit."""


def is_parquet(path: Path) -> bool:
    """Named as a Parquet file (`open_trace_file` checks that the content agrees)."""
    return is_parquet_name(path)


def open_trace_file(path: Path) -> InputFile:
    """A trace file opened, what it holds told by its first bytes: JSONL (plain, gzip or zstd) or
    Parquet. Any other file (an archive, bzip2/xz data, binary data, missing, a directory) is a
    file-level `IngestError` saying what it is and what is read."""
    try:
        return open_input(path, parquet=True)
    except InputFileError as e:
        raise file_error(e.file, e.message) from None


def read_records(source: Path | InputFile) -> Iterator[tuple[int, dict[str, Any] | IngestError]]:
    """(line number, record or the error for that line), for JSONL (plain or compressed, read as a
    stream) and Parquet files (read by batch of rows). A file that cannot be read at all (missing, a
    directory, not JSONL or Parquet) raises a file-level `IngestError` before anything is yielded;
    one whose compressed stream is cut short raises it when the reading gets there."""
    src = source if isinstance(source, InputFile) else open_trace_file(source)
    name = str(src.path)
    if src.format.kind == "parquet":
        src.close()
        yield from enumerate(_parquet_rows(src.path), start=1)
        return
    try:
        for i, rec in jsonl_lines(src.lines()):
            yield i, IngestError(name, i, rec.field, rec.message) if isinstance(rec, LineProblem) else rec
    except InputFileError as e:
        raise file_error(e.file, e.message) from None
    finally:
        src.close()


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:  # a row as a dict would keep one of them
            raise file_error(str(path), f"duplicate column(s) {', '.join(map(repr, dup))} (which one is meant?)")
        with pq.ParquetFile(path) as f:
            for batch in f.iter_batches(batch_size=1024):
                yield from batch.to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise file_error(str(path), f"not a readable Parquet file ({e})") from None


def numbered(records: Iterable[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any] | IngestError]]:
    """In-memory records numbered like the lines of the JSONL file that would hold them."""
    yield from enumerate(records, start=1)


def parse_record(
    rec: dict[str, Any], file: str, line: int, teacher: str | None = None, unit: str = "line",
    limits: Limits = DEFAULT_LIMITS,
) -> ParsedLine:
    """Validate one record into its problem and trace; IngestError names file, line and field.
    The text is checked here once (`checked_text`), and the trace's size (`TraceTooLarge`)."""
    rec, repaired = checked_text(rec, file, line, unit, limits.repair_text)
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
    try:
        provenance = canonical_json({"file": Path(file).name, "line": line, **extra})
    except RecursionError:
        deep = next((k for k, v in extra.items() if _too_deep(v)), "<record>")
        raise IngestError(file, line, deep, "nested too deeply to store", unit) from None
    except (ValueError, TypeError) as e:  # an integer of more than 4,300 digits, a value JSON cannot hold
        bad = next((k for k, v in extra.items() if _unstorable(v)), "<record>")
        raise IngestError(file, line, bad, f"cannot be stored as JSON ({str(e).split(';')[0]})", unit) from None
    problem = Problem(dataset, r.problem_id, r.question, r.gold, tuple(r.choices or ()))
    trace = Trace(r.teacher, dataset, r.problem_id, reasoning, answer_text, truncated, provenance)
    fields = ("question" if "question" in rec and "problem" not in rec else "problem",
              "gold" if "gold" in rec and "gold_answer" not in rec else "gold_answer")
    own = rec.get("trace_id")
    if own is not None and (isinstance(own, bool) or not isinstance(own, str | int) or own == ""):
        raise IngestError(file, line, "trace_id", f"expected a non-empty string, got {repr(own)[:60]}", unit)
    own_id = None if own is None else str(own)
    size = len(reasoning.encode("utf-8")) + len(answer_text.encode("utf-8"))
    if size > limits.max_trace_bytes:
        raise TraceTooLarge(file, line, "reasoning", f"{size:,} bytes of reasoning and answer, over the limit of "
                            f"{limits.max_trace_bytes:,} (ingest.max_trace_bytes, --max-trace-bytes)", unit)
    return ParsedLine(line, problem, trace, r.correct, fields, own_id, repaired)


_NONCHARACTERS = "".join(chr(plane << 16 | 0xFFFE) + chr(plane << 16 | 0xFFFF) for plane in range(1, 17))
_INVALID_TEXT = re.compile(f"[\x00\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff{_NONCHARACTERS}]")
"""What no stored text may hold: NUL, lone surrogates (valid JSON escapes, but not encodable: every
content hash and every UTF-8 writer would fail on them) and Unicode non-characters."""


def checked_text(rec: dict[str, Any], file: str, line: int, unit: str, repair: bool) -> tuple[dict[str, Any], bool]:
    """The record with every string (values and keys, at any depth) free of invalid text; an
    IngestError naming the field and the character, or, with `repair`, each replaced by U+FFFD."""
    repaired = [False]

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, str):
            m = _INVALID_TEXT.search(value)
            if m is None:
                return value
            if not repair:
                raise IngestError(file, line, where or "<key>", f"invalid Unicode: {_describe(m.group())} at character "
                                  f"{m.start() + 1} (fix the file, or ingest with --repair-text to replace it by U+FFFD)",
                                  unit)
            repaired[0] = True
            return _INVALID_TEXT.sub("\ufffd", value)
        if isinstance(value, dict):
            return {clean(k, f"{where}.<key>" if where else "<key>"): clean(v, f"{where}.{k}" if where else str(k))
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    try:
        out: dict[str, Any] = clean(rec, "")
    except RecursionError:
        raise IngestError(file, line, "<record>", "nested too deeply to store", unit) from None
    return (out, True) if repaired[0] else (rec, False)


def _describe(ch: str) -> str:
    cp = ord(ch)
    kind = ("NUL" if cp == 0 else "a lone surrogate" if 0xD800 <= cp <= 0xDFFF else "a Unicode non-character")
    return f"{kind} U+{cp:04X}"


def _unstorable(value: Any) -> bool:
    try:
        canonical_json(value)
    except (ValueError, TypeError, RecursionError):
        return True
    return False


def _too_deep(value: Any) -> bool:
    try:
        canonical_json(value)
    except RecursionError:
        return True
    return False


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
