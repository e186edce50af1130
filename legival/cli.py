"""The `legival` command line (the contract is ../shared/CLI.md): one typer app, one error style,
a progress bar on a terminal, and one line of JSON at the end of standard output."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from legival.console import emit_summary, err_console, fail, out_console, progress_bar

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Legi-Val: how legible are the reasoning traces of reasoning models?",
    pretty_exceptions_enable=False,
)

DbOption = Annotated[Path, typer.Option("--db", help="DuckDB store file (created if missing).")]


def _open_store(db: Path):  # type: ignore[no-untyped-def]
    from legival_core.store import Store, StoreLocked

    try:
        return Store(db)
    except StoreLocked as e:
        fail(str(e))


@app.command()
def ingest(
    files: Annotated[list[Path], typer.Argument(help="Trace files (JSONL or Parquet).")],
    db: DbOption,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip and list bad lines instead of stopping.")] = False,
    teacher: Annotated[str | None, typer.Option(help="Teacher name for every trace (default: the 'model' field).")] = None,
) -> None:
    """Import trace files and re-grade every trace with Legi-Val's graders."""
    from legival_core.ingest import IngestError, ingest_file

    t0 = time.perf_counter()
    results = []
    with _open_store(db) as store, progress_bar("ingest") as advance:
        for f in files:
            try:
                s = ingest_file(store, f, skip_bad=skip_bad, teacher=teacher, progress=advance)
            except IngestError as e:
                fail(f"{e} (nothing from this file was stored)")
            results.append(s)
            for bad in s.bad_lines:
                err_console.print(f"skipped: {bad}", markup=False, highlight=False)
            out_console.print(
                f"{f}: {s.new_traces} new traces, {s.already_stored} already stored, "
                f"{len(s.bad_lines)} bad lines skipped, {s.disagreements} label disagreements",
                markup=False, highlight=False,
            )
            for ex in s.disagreement_examples[:5]:
                out_console.print(f"  disagreement: {ex}", markup=False, highlight=False)
    emit_summary({
        "command": "ingest",
        "files": [r.as_dict() for r in results],
        "new_traces": sum(r.new_traces for r in results),
        "already_stored": sum(r.already_stored for r in results),
        "bad_lines": sum(len(r.bad_lines) for r in results),
        "label_disagreements": sum(r.disagreements for r in results),
        "wall_s": round(time.perf_counter() - t0, 3),
    })


@app.command()
def grade(
    file: Annotated[Path, typer.Argument(help="JSONL records with 'pred' and 'gold' fields.")],
    dataset: Annotated[str, typer.Option(help="Dataset whose grader to use (gsm8k, math, gpqa, lsat, connections).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL: the records plus 'equivalent' and 'grade_status'.")],
    role: Annotated[str, typer.Option(help="teacher: last answer wins; student: first explicit answer wins.")] = "teacher",
) -> None:
    """Batch-grade predictions against gold answers with Legi-Val's graders."""
    from legival_core.stages.batch_grade import BatchGradeError, grade_jsonl
    from legival_core.registry import UnknownName

    if role not in ("teacher", "student"):
        fail(f"--role must be 'teacher' or 'student', not {role!r}")
    t0 = time.perf_counter()
    try:
        with progress_bar("grade") as advance:
            counts = grade_jsonl(file, dataset, out, role=role, progress=advance)  # type: ignore[arg-type]
    except (BatchGradeError, UnknownName) as e:
        fail(str(e))
    emit_summary({"command": "grade", "out": str(out), **counts, "wall_s": round(time.perf_counter() - t0, 3)})


@app.command()
def efficiency(
    db: DbOption,
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = 0.8,
    model: Annotated[str, typer.Option(help="Sentence-embedding model id or local path.")] = "all-MiniLM-L6-v2",
) -> None:
    """Token/step length, embedding redundancy and lexical backtracking for traces that lack them."""
    from legival_core.stages.efficiency import compute_efficiency

    t0 = time.perf_counter()
    with _open_store(db) as store, progress_bar("efficiency") as bar:
        s = compute_efficiency(store, tau=tau, model=model, progress=bar.phase)
    wall = time.perf_counter() - t0
    summary = {"command": "efficiency", **s.as_dict(), "wall_s": round(wall, 3)}
    if s.embed_seconds > 0:
        summary["sentences_per_s"] = round(s.embedded_sentences / s.embed_seconds, 1)
    emit_summary(summary)


@app.command()
def report(
    db: DbOption,
    out: Annotated[Path, typer.Option("--out", help="Report directory.")],
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = 0.8,
) -> None:
    """Build the reports from the store alone (no model call)."""
    from legival_core.reports.build import build_reports

    t0 = time.perf_counter()
    with _open_store(db) as store:
        result = build_reports(store, out, tau=tau)
    _print_table(result.teacher_dataset)
    emit_summary({"command": "report", "out": str(out), "files": sorted(result.files),
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _print_table(df) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    table = Table(title="teacher x dataset", show_lines=False)
    for c in df.columns:
        table.add_column(c, overflow="fold")
    for row in df.iter_rows():
        table.add_row(*[_fmt(v) for v in row])
    out_console.print(table)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


@app.command()
def z3(
    file: Annotated[Path, typer.Argument(help="JSONL records with an 'ir' field (gCoT published format).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL with acs, fas0, jss, rcr, z3_status added.")],
) -> None:
    """Z3 logical verification of arithmetic IRs (gCoT paper)."""
    from legival_core.quality.z3_verify import verify_records

    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    n = 0
    with file.open(encoding="utf-8") as fin, out.open("w", encoding="utf-8") as fout, progress_bar("z3") as advance:
        def records():  # type: ignore[no-untyped-def]
            for i, line in enumerate(fin, start=1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        fail(f"{file}:{i}: field '<json>': malformed JSON: {e.msg}")

        for rec in verify_records(records()):
            fout.write(json.dumps(rec, ensure_ascii=False) + "\n")
            counts[rec["z3_status"]] = counts.get(rec["z3_status"], 0) + 1
            n += 1
            advance(1)
    emit_summary({"command": "z3", "records": n, "z3_status": counts, "out": str(out),
                  "wall_s": round(time.perf_counter() - t0, 3)})


def main() -> None:  # pragma: no cover
    app()
