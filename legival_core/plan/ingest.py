"""The spec's trace files ingested into a plan's scratch store all together.

A run ingests a teacher's files one after the other (`stages.ingest.ingest_spec_file`: a stage run
per file, its reads of what the store holds, its transaction: about twenty statements). A plan of a
spec of thousands of teachers spent most of its time there, in DuckDB's cost per statement, so here
the files are read, parsed and graded by the same functions and the scratch store is read once and
written in one transaction, when that is known to store exactly what the files one by one would: no
line of any file is bad (unreadable, invalid, over the size limit), no problem is defined two ways
(by the store or any two lines), no record's own trace id names two traces, no unit of the ingest
stage failed before (a run would skip it) and none fails its grading now. Otherwise, or on any file
error, the files go one by one as before (the run's code), which stores what it stores or raises
the error that names file, line and field. tests/core/plan/test_batched_plan.py compares the two.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from legival_core.readers.input_files import record_limit
from legival_core.readers.sources import OWN, choose
from legival_core.readers.trace_records import (
    IngestError,
    ParsedLine,
    dedupe_problems,
    grade_row,
    parse_record,
    problem_row,
    read_records,
    trace_row,
)
from legival_core.run_config import Ingest, Teacher
from legival_core.stages.base import InProcessExecutor
from legival_core.stages.ingest import GradedLine, IngestStage, ingest_spec_file, select_records
from legival_core.stages.isolation import StageFailures, current, split_failures
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.store.failures import failed_units
from legival_core.store.ingest import damaged_store_errors, stored_problems, traces_by_own_id

File = tuple[Path, str, str | None]
"""A trace file, its teacher and the spec's `select` (the model whose records it keeps)."""


def ingest_spec_files(store: Store, teachers: Sequence[Teacher], limits: Ingest) -> None:
    """Store the trace files of `teachers` (those without `generate:`), in the spec's order, as
    `ingest_spec_file` of each would."""
    files = [(Path(path), t.name, t.select) for t in teachers if t.generate is None for path in t.traces]
    own = all(_own_format(Path(p), t.format) for t in teachers if t.generate is None for p in t.traces)
    with tempfile.TemporaryDirectory(prefix="legival-plan-ingest-") as tmp:
        if files and own and _together(store, files, limits, Path(tmp)):
            return
    for t in teachers:
        if t.generate is None:
            for path in t.traces:
                ingest_spec_file(store, Path(path), t.name, t.select, limits, t.format, t.source_options())


def _own_format(path: Path, fmt: str) -> bool:
    """Read as Legi-Val's own trace records (the batched path reads only those); an unreadable file
    goes the one-by-one way, which names it."""
    try:
        return choose(path, fmt) == OWN
    except IngestError:
        return False


def _together(store: Store, files: list[File], limits: Ingest, tmp: Path) -> bool:
    """Ingest `files` in one transaction; False (nothing written) where one by one could differ."""
    with damaged_store_errors(store):
        if failed_units(store, "ingest"):  # the ingest stage's failures (`failure_stage`)
            return False
    read: list[tuple[str, str, list[ParsedLine]]] = []
    for i, (path, teacher, select) in enumerate(files):
        try:
            with record_limit(limits.max_record_bytes):  # what the stage holds a line to
                src = select_records(path, select, _folder(tmp, i)) if select else path
                lines: dict[str, ParsedLine] = {}  # a repeated trace: its first line, as the stage keeps it
                for line, rec in read_records(src):
                    if isinstance(rec, IngestError):
                        return False
                    p = parse_record(rec, str(src), line, teacher, "line", limits)
                    lines.setdefault(p.trace.trace_id, p)
        except IngestError:
            return False
        read.append((str(src), teacher, list(lines.values())))
    every = [p for _, _, parsed in read for p in parsed]
    with damaged_store_errors(store):
        if not _agree(store, every):
            return False
        stored = reads.existing_trace_ids(store, [p.trace.trace_id for p in every])
    graded: list[tuple[str, list[GradedLine]]] = []
    for name, teacher, parsed in read:
        fresh = [p for p in parsed if p.trace.trace_id not in stored]
        stored.update(p.trace.trace_id for p in fresh)
        results: list[GradedLine] = []
        for batch in IngestStage(Path(name), teacher, limits=limits).run(fresh, InProcessExecutor()):
            ok, failures = split_failures(batch)
            if failures:
                return False
            results += ok
        graded.append((name, results))
    with damaged_store_errors(store), store.transaction():
        store.insert_rows("problems", dedupe_problems([problem_row(r.parsed.problem) for _, rs in graded for r in rs]))
        store.insert_rows("traces", [trace_row(r.parsed, name) for name, rs in graded for r in rs])
        store.insert_rows("grades", [grade_row(r.parsed.trace.trace_id, r.grader, r.grade) for _, rs in graded for r in rs])
    ledger = current().ledger  # what each file's stage run adds to the command's summary
    ledger += [StageFailures("ingest", attempted=len(rs)) for _, rs in graded if rs]
    return True


def _agree(store: Store, lines: list[ParsedLine]) -> bool:
    """No conflict one file after another could meet (`stages.ingest.find_conflicts`): every problem
    has one question, gold and choices across the store and the lines, and every record's own trace
    id names one trace."""
    keys = list(dict.fromkeys((p.problem.dataset, p.problem.problem_id) for p in lines))
    seen = {k: (v.question, v.gold, json.dumps(json.loads(v.choices)) if v.choices else "[]")
            for k, v in stored_problems(store, keys).items()}
    for p in lines:
        q = p.problem
        if seen.setdefault((q.dataset, q.problem_id), (q.question, q.gold, json.dumps(list(q.choices)))) \
                != (q.question, q.gold, json.dumps(list(q.choices))):
            return False
    own = [p for p in lines if p.own_id is not None]
    names: dict[str, str] = {}
    held = traces_by_own_id(store, [p.own_id for p in own if p.own_id is not None]) if own else {}
    pairs = [(o, t.trace_id) for o, ts in held.items() for t in ts] + [(p.own_id, p.trace.trace_id) for p in own]
    return all(names.setdefault(o, tid) == tid for o, tid in pairs if o is not None)


def _folder(tmp: Path, i: int) -> Path:
    """A folder of its own for the i-th file's selected records (files of several teachers may share
    a name, as the demo's five selections of one file do)."""
    out = tmp / str(i)
    out.mkdir()
    return out
