"""The ingest stage: a trace file (JSONL, plain or gzip/zstd-compressed, or Parquet) into the store,
every trace graded by our graders.

plan   reads and validates the whole file (errors name file, line and field) and lists its traces
       that are not stored yet;
run    grades them (pure: no store), in chunks, and hands the whole file back as ONE batch;
commit writes the file's problems, traces and grades in ONE transaction.

A bad line therefore either stops the import with an error naming file, line and field, leaving the
store exactly as it was, or (with `skip_bad`) is skipped and listed. A line that contradicts the
store or an earlier line is a bad line too (never silently dropped): a problem redefined with another
question, gold or choices, a record's own `trace_id` field given to another trace, or one unit of the
input (its source's `key`: an OpenAI custom_id, an Inspect sample and epoch) given another trace. Trace ids are
content hashes, so importing the same file twice adds nothing, and a line repeating a trace of the
same file is counted (`duplicate_records`), not stored twice. The generate stage stores its traces through the same
stage (`ingest_records`: in-memory records instead of a file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from legival_core import untrusted_json
from legival_core.readers.input_files import InputFileError, record_limit
from legival_core.readers.sources import AUTO, OWN, SourceOptions, read_source, source_info, unit_key
from legival_core.readers.trace_records import (
    IngestError,
    ParsedLine,
    SkippedUnit,
    TraceRecord,
    TraceTooLarge,
    dedupe_problems,
    file_error,
    grade_row,
    numbered,
    open_trace_file,
    parse_record,
    problem_row,
    read_records,
    trace_row,
)
from legival_core.run_config import Ingest, Teacher
from legival_core.stages.base import Executor, Plan, StoreAccess, Work, run_stage
from legival_core.stages.grade import grade_teacher
from legival_core.stages.isolation import UnitFailure, split_failures
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.store.ingest import StoredTrace, damaged_store_errors, stored_problems, traces_by_own_id
from legival_core.types import Grade, Problem

DEFAULT_INGEST = Ingest()
"""The spec's `ingest:` defaults (`legival ingest` without options)."""

__all__ = ["IngestError", "IngestStage", "IngestSummary", "ParsedLine", "TraceRecord", "ingest_file",
           "ingest_records", "parse_record", "read_records"]

@dataclass(slots=True)
class IngestSummary:
    file: str
    format: str = OWN
    """The trace source the file was read as (`readers.sources`; `auto` says what it chose)."""
    lines: int = 0
    new_traces: int = 0
    already_stored: int = 0
    new_problems: int = 0
    duplicate_records: int = 0
    """Records repeating a trace already in this file (the same trace id): stored once, not an error."""
    bad_lines: list[str] = field(default_factory=list)
    too_large: list[str] = field(default_factory=list)
    """Records over `ingest.max_trace_bytes`: skipped (not stored), each with its reason."""
    skipped: list[str] = field(default_factory=list)
    """Units the source says hold no trace (a failed batch request): skipped, each with its reason."""
    repaired_text: int = 0
    """Records whose invalid Unicode was replaced by U+FFFD (`ingest.repair_text`)."""
    warnings: list[str] = field(default_factory=list)
    """What was accepted but is probably not what was meant (a file with no record)."""
    disagreements: int = 0
    disagreement_examples: list[str] = field(default_factory=list)
    unparsed: int = 0
    timeouts: int = 0
    truncated: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "format": self.format,
            "lines": self.lines,
            "new_traces": self.new_traces,
            "already_stored": self.already_stored,
            "new_problems": self.new_problems,
            "duplicate_records": self.duplicate_records,
            "bad_lines": len(self.bad_lines),
            "skipped": len(self.skipped),
            "too_large": len(self.too_large),
            "repaired_text": self.repaired_text,
            "label_disagreements": self.disagreements,
            "unparsed": self.unparsed,
            "grade_timeouts": self.timeouts,
            "truncated": self.truncated,
            "warnings": self.warnings,
        }


@dataclass(frozen=True, slots=True)
class GradedLine:
    parsed: ParsedLine
    grader: str
    grade: Grade


@dataclass(frozen=True, eq=False)
class IngestStage:
    """One trace file (or, with `records`, in-memory records stored as if read from `path`)."""

    path: Path
    teacher: str | None = None
    skip_bad: bool = False
    records: Sequence[dict[str, Any]] | None = None
    chunk: int = 256
    """Traces graded per chunk (the whole file still commits as one batch)."""
    graded: Callable[[int], None] | None = None
    """Called with the number of traces of each graded chunk (a progress bar's advance)."""
    limits: Ingest = DEFAULT_INGEST
    """The input boundary's limits (the spec's `ingest:` section, the command's options)."""
    name: str = "ingest"
    fmt: str = AUTO
    """The trace source to read `path` with (`readers.sources`: `auto` sniffs)."""
    options: SourceOptions = SourceOptions()

    def plan(self, store: Store) -> Plan[ParsedLine, IngestSummary]:
        name = str(self.path)
        if self.records is not None:
            fmt, unit, records = OWN, "line", numbered(self.records)
        else:
            fmt, unit, records = read_source(self.path, self.fmt, self.options)
        summary = IngestSummary(file=name, format=fmt)
        lines: list[ParsedLine] = []
        errors: list[IngestError] = []
        too_large: list[UnitFailure] = []
        key = source_info(fmt).key if self.records is None else ()
        with record_limit(self.limits.max_record_bytes):  # every line, every archive member read below
            for line, rec in records:
                summary.lines += 1
                try:
                    if isinstance(rec, IngestError):
                        raise rec
                    one = parse_record(rec, name, line, self.teacher, unit, self.limits)
                    keyed = unit_key(rec, key) if key else None
                    lines.append(replace(one, unit_key=keyed) if keyed else one)
                except TraceTooLarge as e:
                    summary.too_large.append(str(e))
                    too_large.append(_skipped(e, rec, self.teacher))
                except SkippedUnit as e:
                    summary.skipped.append(str(e))
                except IngestError as e:
                    errors.append(e)
        if self.records is None and summary.lines == 0:
            summary.warnings.append(f"{name}: no records (" + (
                f"read as {fmt}: it holds no {unit})" if fmt != OWN else
                "a Parquet file with 0 rows)" if unit == "row" else "the file is empty or holds only blank lines)"))
        with damaged_store_errors(store):
            conflicts = find_conflicts(store, lines, name, unit)
        errors = sorted([*errors, *conflicts.values()], key=lambda e: e.line)
        if errors and not self.skip_bad:
            raise errors[0]
        summary.bad_lines = [str(e) for e in errors]
        parsed: dict[str, ParsedLine] = {}
        for p in lines:
            if p.line in conflicts:
                continue
            if p.trace.trace_id in parsed:
                summary.duplicate_records += 1
                continue
            parsed[p.trace.trace_id] = p
        with damaged_store_errors(store):
            stored = reads.existing_trace_ids(store, list(parsed))
        summary.already_stored = len(stored)
        fresh = [p for tid, p in parsed.items() if tid not in stored]
        summary.repaired_text = sum(p.repaired for p in fresh)
        return Plan(fresh, summary, total=len(fresh), failures=too_large)

    def run(self, units: Sequence[ParsedLine], executor: Executor) -> Iterator[list[GradedLine]]:
        results: list[GradedLine] = []
        failed: list[UnitFailure] = []
        for batch in executor.run(Work(_no_worker, grade_lines, self.chunk), units):
            graded, failures = split_failures(batch)
            results += graded
            failed += failures
            if self.graded is not None:
                self.graded(len(batch))
        results.sort(key=lambda r: r.parsed.line)
        yield [*results, *failed]  # type: ignore[list-item]  # run_stage stores the failures (base.py)

    def commit(self, store: Store, results: Sequence[GradedLine], plan: Plan[Any, IngestSummary]) -> int:
        s = plan.summary
        for r in results:
            g, p = r.grade, r.parsed
            s.unparsed += g.status == "unparsed"
            s.timeouts += g.status == "timeout"
            s.truncated += g.status == "truncated"
            if p.source_correct is not None and p.source_correct != g.correct and g.status != "truncated":
                s.disagreements += 1
                if len(s.disagreement_examples) < 20:
                    s.disagreement_examples.append(
                        f"line {p.line} ({p.trace.problem_id}): file says {p.source_correct}, "
                        f"we say {g.correct} (extracted {g.extracted!r})"
                    )
        with damaged_store_errors(store), store.transaction():
            s.new_problems += store.insert_rows(
                "problems", dedupe_problems([problem_row(r.parsed.problem) for r in results])).inserted
            s.new_traces += store.insert_rows("traces", [trace_row(r.parsed, s.file) for r in results]).inserted
            store.insert_rows("grades", [grade_row(r.parsed.trace.trace_id, r.grader, r.grade) for r in results])
        return len(results)


def _skipped(e: IngestError, rec: Any, teacher: str | None) -> UnitFailure:
    """A record skipped at the boundary, as a failure row: no trace is stored, so it names its teacher
    and dataset itself (the report's coverage counts it)."""
    get = rec.get if isinstance(rec, dict) else (lambda _k: None)
    who = teacher or get("teacher") or get("model")
    return UnitFailure(f"{Path(e.file).name}:{e.line}", None, f"skipped at ingest: {e.message}",
                       str(who) if who is not None else None,
                       str(get("dataset")) if get("dataset") is not None else None)


# ------------------------------------------------------------------------------------------ conflicts


def find_conflicts(store: Store, lines: Sequence[ParsedLine], file: str, unit: str = "line") -> dict[int, IngestError]:
    """line -> the error of each line that contradicts the store or an earlier line of the same file:
    a problem redefined (another question, gold or choices), a record's own `trace_id` given to
    another trace, or one unit of the input (its source's key: an OpenAI `custom_id`, an Inspect sample
    and epoch) given twice with different traces. The store is the reference for what it holds;
    otherwise the first line that defines a problem (or uses an own id, or a unit) is."""
    conflicts: dict[int, IngestError] = {}
    keys = list(dict.fromkeys((p.problem.dataset, p.problem.problem_id) for p in lines))
    stored = {k: Problem(k[0], k[1], v.question, v.gold, tuple(json.loads(v.choices)) if v.choices else ())
              for k, v in stored_problems(store, keys).items()}
    first: dict[tuple[str, str], ParsedLine] = {}
    for p in lines:
        key = (p.problem.dataset, p.problem.problem_id)
        ref = stored.get(key)
        earlier = None if ref is not None else first.setdefault(key, p)
        if ref is None and earlier is not None:
            ref = earlier.problem
        problem = _problem_conflict(ref, p, None if earlier is None or earlier is p else earlier.line)
        if problem is not None:
            field_name, message = problem
            conflicts[p.line] = IngestError(file, p.line, field_name, message, unit)
    first_unit: dict[str, ParsedLine] = {}
    for p in lines:
        if p.unit_key is None or p.line in conflicts:
            continue
        before = first_unit.setdefault(p.unit_key[1], p)
        if before.trace.trace_id != p.trace.trace_id:
            conflicts[p.line] = IngestError(
                file, p.line, p.unit_key[0], f"{p.unit_key[1]} is also at {unit} {before.line} of this file, with "
                f"another trace ({_trace_diff(_identity(before), p)} differ): one input gives two answers for one "
                "unit (which is meant?)", unit)
    own = [p for p in lines if p.own_id is not None and p.line not in conflicts]
    if own:
        held = traces_by_own_id(store, [p.own_id for p in own if p.own_id is not None])
        first_own: dict[str, ParsedLine] = {}
        for p in own:
            assert p.own_id is not None
            other = next((t for t in held.get(p.own_id, []) if t.trace_id != p.trace.trace_id), None)
            if other is not None:
                conflicts[p.line] = IngestError(
                    file, p.line, "trace_id", f"trace id {p.own_id!r} is stored for another trace "
                    f"({_trace_diff(other, p)} differ)", unit)
                continue
            before = first_own.setdefault(p.own_id, p)
            if before.trace.trace_id != p.trace.trace_id:
                conflicts[p.line] = IngestError(
                    file, p.line, "trace_id", f"trace id {p.own_id!r} was given at line {before.line} of this "
                    f"file to another trace ({_trace_diff(_identity(before), p)} differ)", unit)
    return conflicts


def _problem_conflict(ref: Problem | None, p: ParsedLine, earlier_line: int | None) -> tuple[str, str] | None:
    """(field, message) when `p` defines its problem differently from `ref` (None: no conflict)."""
    if ref is None:
        return None
    q_field, g_field = p.fields
    new = p.problem
    for field_name, what, a, b in (
        (g_field, "gold", ref.gold, new.gold),
        (q_field, "question", ref.question, new.question),
        ("choices", "choices", json.dumps(list(ref.choices)), json.dumps(list(new.choices))),
    ):
        if a == b:
            continue
        shown_a, shown_b = _snippets(a, b)
        if earlier_line is None:
            return field_name, f"problem {new.problem_id} is stored with {what} {shown_a}, this file says {shown_b}"
        return field_name, (f"problem {new.problem_id} has {what} {shown_a} at line {earlier_line} of this file, "
                            f"this line says {shown_b}")
    return None


def _snippets(a: str, b: str, width: int = 60) -> tuple[str, str]:
    """Two differing texts as quoted snippets: whole when short, else around the first difference."""
    def quote(x: str) -> str:
        return "'" + x.replace("\n", "\\n") + "'"

    if len(a) <= width and len(b) <= width:
        return quote(a), quote(b)
    i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo = max(0, i - 20)

    def cut(x: str) -> str:
        part = x[lo : i + width - 20]
        return ("..." if lo else "") + quote(part)[1:-1] + ("..." if i + width - 20 < len(x) else "")

    return f"'{cut(a)}' (from character {i + 1})", f"'{cut(b)}'"


def _identity(p: ParsedLine) -> StoredTrace:
    t = p.trace
    return StoredTrace(t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text)


def _trace_diff(a: StoredTrace, p: ParsedLine) -> str:
    t = p.trace
    parts = [name for name, x, y in (("model", a.teacher, t.teacher), ("dataset", a.dataset, t.dataset),
                                      ("problem_id", a.problem_id, t.problem_id),
                                      ("reasoning", a.reasoning, t.reasoning),
                                      ("answer text", a.answer_text, t.answer_text)) if x != y]
    return ", ".join(parts) or "content"


def _no_worker() -> None:
    return None


def grade_lines(_w: None, units: Sequence[ParsedLine]) -> list[GradedLine]:
    """Grade a chunk of parsed lines (pure: no store)."""
    out = []
    for p in units:
        t = p.trace
        key, g = grade_teacher(p.problem, t.reasoning, t.answer_text, t.truncated)
        out.append(GradedLine(p, key, g))
    return out


def ingest_file(
    store: Store | StoreAccess,
    path: str | Path,
    skip_bad: bool = False,
    teacher: str | None = None,
    progress: Callable[[int], None] | None = None,
    executor: Executor | None = None,
    limits: Ingest = DEFAULT_INGEST,
    fmt: str = AUTO,
    options: SourceOptions | None = None,
) -> IngestSummary:
    """Ingest one trace file (all or nothing), read as the trace source `fmt` (`readers.sources`:
    `auto` sniffs); `progress(n)` advances by each graded chunk."""
    opts = options or SourceOptions(teacher=teacher)
    return run_stage(IngestStage(Path(path), teacher, skip_bad, graded=progress, limits=limits, fmt=fmt, options=opts),
                     store, executor)


def ingest_records(store: Store | StoreAccess, source: str, records: Iterable[dict[str, Any]],
                   executor: Executor | None = None) -> IngestSummary:
    """Store in-memory trace records exactly as the JSONL file `source` holding them would be stored
    (its name is each trace's `source_file`, the record's position its `source_line`)."""
    return run_stage(IngestStage(Path(source), records=tuple(records)), store, executor)


def select_records(path: Path, model: str, tmp: Path) -> Path:
    """The records of one model from a file that holds several (`select:` in the spec), under the
    same file name and at the same line numbers (the store records name and line as provenance)."""
    out = tmp / path.name
    src = open_trace_file(path)
    if src.format.kind == "parquet":
        src.close()
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        col = "model" if "model" in t.column_names else "teacher"
        pq.write_table(t.filter(pc.equal(t[col], model)), out)
        return out
    kept = seen = 0
    with src, out.open("wb") as dst, _whole_file_errors():  # plain JSONL whatever compressed the original
        for _, raw in src.lines():
            line = raw + b"\n"
            seen += bool(raw.strip())
            try:
                rec = untrusted_json.loads(raw, text=False) if raw.strip() else None
            except ValueError:
                dst.write(line)  # ingest reports the bad line with its message
                continue
            if isinstance(rec, dict) and (rec.get("model") == model or rec.get("teacher") == model):
                dst.write(line)
                kept += 1
            else:
                dst.write(b"\n")  # blank: ingest skips it, and line numbers stay the original file's
    if kept == 0 and seen:  # a file with no record at all is ingested as one (a warning)
        raise file_error(str(path), f"no record has model {model!r} (spec `select`)")
    return out


@contextmanager
def _whole_file_errors() -> Iterator[None]:
    """An input file that cannot be read (a compressed stream cut short) as ingest's file error."""
    try:
        yield
    except InputFileError as e:
        raise file_error(e.file, e.message) from None


def ingest_spec_file(store: Store | StoreAccess, path: Path, teacher: str, select: str | None,
                     limits: Ingest = DEFAULT_INGEST, fmt: str = AUTO,
                     options: SourceOptions | None = None) -> IngestSummary:
    """A spec teacher's trace file, read as `fmt` with the teacher's source options: only its records
    when `select` is set (`select_records`, Legi-Val's own files), errors naming the spec's file and line
    (never the temporary copy), `file` = the spec's path."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="legival-ingest-") as tmp:
        with record_limit(limits.max_record_bytes):
            src = select_records(path, select, Path(tmp)) if select else path
        try:
            s = ingest_file(store, src, teacher=teacher, limits=limits, fmt=fmt,
                            options=options or SourceOptions(teacher=teacher))
        except IngestError as e:
            if src == path:
                raise
            raise IngestError(str(path), e.line, e.field, e.message, e.unit) from None
    s.file = str(path)
    return s


class GeneratingTeacher(RuntimeError):
    """A teacher with `generate:` given to ingest: its traces come from the generate stage."""


@dataclass(slots=True)
class TeacherIngest:
    """A spec teacher's trace files stored: per file its summary, and the totals."""

    teacher: str
    files: list[dict[str, Any]] = field(default_factory=list)
    new_traces: int = 0
    already_stored: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"teacher": self.teacher, "files": self.files, "new_traces": self.new_traces,
                "already_stored": self.already_stored}


def ingest_teacher(store: Store | StoreAccess, teacher: Teacher, limits: Ingest | None = None) -> TeacherIngest:
    """Ingest a spec teacher's trace files (re-ingest adds nothing: trace ids are content hashes)."""
    if teacher.generate is not None:
        raise GeneratingTeacher(
            f"teacher {teacher.name!r} generates its traces ({teacher.generate.backend}, {teacher.generate.model}); "
            "it has no trace files to ingest: run `legival generate --spec` or `legival run`"
        )
    r = TeacherIngest(teacher.name)
    for path in teacher.traces:
        s = ingest_spec_file(store, path, teacher.name, teacher.select, limits or Ingest(), teacher.format,
                             teacher.source_options())
        r.files.append(s.as_dict())
        r.new_traces += s.new_traces
        r.already_stored += s.already_stored
    return r


def _ingest_jobs(ctx: RunContext) -> list[Job]:
    """One job per chosen teacher with trace files."""
    limits = ctx.spec.ingest

    def job(teacher: Teacher) -> Job:
        def run(access: StoreAccess, _executor: Executor | None, _progress: Any) -> TeacherIngest:
            return ingest_teacher(access, teacher, limits)

        return Job("ingest", f"ingest {teacher.name}", run)

    return [job(t) for t in ctx.chosen() if t.generate is None]


def _new_traces(results: list[Any]) -> dict[str, Any]:
    return {"new_traces": sum(r.new_traces for r in results)}


register_stage("ingest", "legival ingest FILE --db DB", build=_ingest_jobs, summarize=_new_traces, order=10,
               description="trace files into the store, graded (one transaction per file)")
