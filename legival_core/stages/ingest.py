"""The ingest stage: a trace file (JSONL or Parquet) into the store, every trace graded by our graders.

plan   reads and validates the whole file (errors name file, line and field) and lists its traces
       that are not stored yet;
run    grades them (pure: no store), in chunks, and hands the whole file back as ONE batch;
commit writes the file's problems, traces and grades in ONE transaction.

A bad line therefore either stops the import with an error naming file, line and field, leaving the
store exactly as it was, or (with `skip_bad`) is skipped and listed. Trace ids are content hashes,
so importing the same file twice adds nothing. The generate stage stores its traces through the same
stage (`ingest_records`: in-memory records instead of a file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legival_core.stages.base import Executor, Plan, StoreAccess, Work, register_stage, run_stage
from legival_core.stages.grade import grade_teacher
from legival_core.stages.trace_records import (
    IngestError,
    ParsedLine,
    TraceRecord,
    dedupe_problems,
    grade_row,
    is_parquet,
    numbered,
    parse_record,
    problem_row,
    read_records,
    trace_row,
)
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import Grade

__all__ = ["IngestError", "IngestStage", "IngestSummary", "ParsedLine", "TraceRecord", "ingest_file",
           "ingest_records", "parse_record", "read_records"]

register_stage("ingest", "legival ingest FILE --db DB",
               description="trace files into the store, graded (one transaction per file)")


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
    name: str = "ingest"
    needs: tuple[str, ...] = ()

    def plan(self, store: Store) -> Plan[ParsedLine, IngestSummary]:
        name = str(self.path)
        if self.records is None and not self.path.exists():
            raise IngestError(name, 0, "<file>", "no such file")
        unit = "row" if self.records is None and is_parquet(self.path) else "line"
        summary = IngestSummary(file=name)
        parsed: dict[str, ParsedLine] = {}
        source = numbered(self.records) if self.records is not None else read_records(self.path)
        for line, rec in source:
            summary.lines += 1
            try:
                if isinstance(rec, IngestError):
                    raise rec
                p = parse_record(rec, name, line, self.teacher, unit)
            except IngestError as e:
                if not self.skip_bad:
                    raise
                summary.bad_lines.append(str(e))
                continue
            parsed.setdefault(p.trace.trace_id, p)
        stored = reads.existing_trace_ids(store, list(parsed))
        summary.already_stored = len(stored)
        fresh = [p for tid, p in parsed.items() if tid not in stored]
        return Plan(fresh, summary, total=len(fresh))

    def run(self, units: Sequence[ParsedLine], executor: Executor) -> Iterator[list[GradedLine]]:
        results: list[GradedLine] = []
        for batch in executor.run(Work(_no_worker, grade_lines, self.chunk), units):
            results += batch
            if self.graded is not None:
                self.graded(len(batch))
        results.sort(key=lambda r: r.parsed.line)
        yield results

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
        with store.transaction():
            s.new_problems += store.insert_rows(
                "problems", dedupe_problems([problem_row(r.parsed.problem) for r in results])).inserted
            s.new_traces += store.insert_rows("traces", [trace_row(r.parsed, s.file) for r in results]).inserted
            store.insert_rows("grades", [grade_row(r.parsed.trace.trace_id, r.grader, r.grade) for r in results])
        return len(results)


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
) -> IngestSummary:
    """Ingest one trace file (all or nothing); `progress(n)` advances by each graded chunk."""
    return run_stage(IngestStage(Path(path), teacher, skip_bad, graded=progress), store, executor)


def ingest_records(store: Store | StoreAccess, source: str, records: Iterable[dict[str, Any]],
                   executor: Executor | None = None) -> IngestSummary:
    """Store in-memory trace records exactly as the JSONL file `source` holding them would be stored
    (its name is each trace's `source_file`, the record's position its `source_line`)."""
    return run_stage(IngestStage(Path(source), records=tuple(records)), store, executor)
