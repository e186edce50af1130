"""`legival ingest`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail, out_console, progress_bar
from legival.paths import Role
from legival_core.run_config import Ingest, default_of


@app.command()
def ingest(
    files: Annotated[list[Path], typer.Argument(
        help="Trace files: Legi-Val's JSONL (plain, gzip- or zstd-compressed, told by content) or Parquet, or "
             "the files of evaluation tools (--from)."), Role.INPUT],
    db: DbOption,
    source: Annotated[str, typer.Option(
        "--from", help="What the files are: auto (told by their content) or a format of `legival list formats` "
                       "(legival, inspect, lm-eval, hf, openai).")] = "auto",
    dataset: Annotated[str | None, typer.Option(
        help="The dataset of every trace, when the source does not say it in a way Legi-Val knows.")] = None,
    mapping: Annotated[str | None, typer.Option(
        "--map", help="Columns of a table source as trace fields: reasoning=response,problem=question,...")] = None,
    requests: Annotated[Path | None, typer.Option(
        help="An OpenAI batch input file (the questions of a batch output file)."), Role.INPUT] = None,
    problems: Annotated[Path | None, typer.Option(
        help="The dataset's problems in its own format (the gold answers of a source that lacks them)."), Role.INPUT] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip and list bad lines instead of stopping.")] = False,
    teacher: Annotated[str | None, typer.Option(help="Teacher name for every trace (default: the 'model' field).")] = None,
    max_trace_bytes: Annotated[int, typer.Option(
        "--max-trace-bytes", help="Skip (and count) traces whose reasoning + answer is longer (UTF-8 bytes).")
    ] = default_of(Ingest, "max_trace_bytes"),
    max_record_bytes: Annotated[int, typer.Option(
        "--max-record-bytes", help="What one record may hold once decompressed (a JSONL line, a member of an Inspect "
        ".eval log); counted while reading, so a decompression bomb ends in seconds.")
    ] = default_of(Ingest, "max_record_bytes"),
    repair_text: Annotated[bool, typer.Option(
        "--repair-text", help="Replace invalid Unicode (lone surrogates, NUL, non-characters) by U+FFFD "
        "instead of refusing the line; repaired records are counted.")] = False,
) -> None:
    """Import trace files and re-grade every trace with Legi-Val's graders."""
    from legival_core.readers.sources import SourceOptions, parse_mapping
    from legival_core.stages.ingest import IngestError, ingest_file
    from legival_core.store import StoreError

    limits = settings(Ingest, max_trace_bytes=max_trace_bytes, repair_text=repair_text, max_record_bytes=max_record_bytes)
    try:
        options = SourceOptions(dataset=dataset, mapping=parse_mapping(mapping), requests=requests,
                                problems=problems, teacher=teacher)
    except ValueError as e:
        fail(str(e))

    t0 = time.perf_counter()
    results = []
    existed = db.exists()
    try:
        with open_store(db, create=True) as store, progress_bar("ingest") as advance:
            for f in files:
                try:
                    s = ingest_file(store, f, skip_bad=skip_bad, teacher=teacher, progress=advance, limits=limits,
                                    fmt=source, options=options)
                except IngestError as e:
                    fail(f"{e} (nothing from this file was stored)")
                except StoreError as e:
                    fail(str(e))
                results.append(s)
                if source == "auto" and s.format != "legival":
                    err_console.print(f"{f}: read as {s.format} (--from auto)", markup=False, highlight=False, soft_wrap=True)
                for bad in [*s.bad_lines, *s.too_large, *s.skipped]:
                    err_console.print(f"skipped: {bad}", markup=False, highlight=False, soft_wrap=True)
                for warning in s.warnings:
                    err_console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
                out_console.print(
                    f"{f}: {s.new_traces} new traces, {s.already_stored} already stored, "
                    f"{s.duplicate_records} duplicate records, {len(s.bad_lines)} bad lines skipped, "
                    f"{len(s.too_large)} too large skipped, "
                    + (f"{len(s.skipped)} skipped by the source (no trace in them), " if s.skipped else "")
                    + f"{s.repaired_text} repaired, "
                    f"{s.disagreements} label disagreements",
                    markup=False, highlight=False, soft_wrap=True,
                )
                for ex in s.disagreement_examples[:5]:
                    out_console.print(f"  disagreement: {ex}", markup=False, highlight=False, soft_wrap=True)
    except SystemExit:
        from legival.preflight import discard_if_unused

        discard_if_unused(db.resolve(), created=not existed)  # refused: no empty store of ours left behind
        raise
    emit_summary({
        "command": "ingest",
        "files": [r.as_dict() for r in results],
        "new_traces": sum(r.new_traces for r in results),
        "already_stored": sum(r.already_stored for r in results),
        "duplicate_records": sum(r.duplicate_records for r in results),
        "bad_lines": sum(len(r.bad_lines) for r in results),
        "too_large": sum(len(r.too_large) for r in results),
        "skipped": sum(len(r.skipped) for r in results),
        "repaired_text": sum(r.repaired_text for r in results),
        "label_disagreements": sum(r.disagreements for r in results),
        "wall_s": round(time.perf_counter() - t0, 3),
    })
