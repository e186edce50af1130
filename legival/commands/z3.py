"""`legival z3`: Z3 logical verification (gCoT) of records with an `ir` field."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, err_console, fail, progress_bar
from legival.paths import Role
from legival_core.quality.z3_ir import DEFAULT_TIMEOUT_MS


@app.command()
def z3(
    file: Annotated[Path, typer.Argument(help="JSONL records with an 'ir' field (gCoT published format), plain or gzip/zstd-compressed."), Role.INPUT],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL with acs, fas0, jss, rcr, z3_status added."), Role.OUTPUT_FILE],
    timeout_ms: Annotated[int, typer.Option(
        help="Z3 time limit per check, in milliseconds (at least 1: Z3 reads 0 as no limit).")] = DEFAULT_TIMEOUT_MS,
) -> None:
    """Z3 logical verification of arithmetic IRs; one output record per input record (a record that
    cannot be verified gets z3_status 'invalid_ir' or 'error' and the reason in z3_error). FILE may be
    gzip- or zstd-compressed."""
    from legival_core.quality.z3_verify import verify_records
    from legival_core.readers.input_files import InputFileError
    from legival_core.readers.records import LineProblem, read_jsonl_records

    if timeout_ms < 1:
        fail(f"--timeout-ms must be at least 1 (milliseconds; Z3 reads 0 as no limit), not {timeout_ms}")
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    try:
        for i, rec in read_jsonl_records(file):
            if isinstance(rec, LineProblem):
                fail(f"{file}:{i}: field '{rec.field}': {rec.message}")
            records.append(rec)
    except InputFileError as e:
        fail(str(e))
    if out.is_dir():
        fail(f"--out {out}: is a directory (give the output file's path)")
    if not out.parent.is_dir():
        fail(f"--out {out}: the directory {out.parent} does not exist")
    if not records:
        err_console.print(f"warning: {file}: no records (the file is empty or holds only blank lines); {out} "
                          "will be empty", markup=False, highlight=False, soft_wrap=True)
    counts: dict[str, int] = {}
    tmp = out.with_name(out.name + ".tmp")
    try:
        try:
            fout = tmp.open("w", encoding="utf-8")
        except OSError as e:
            fail(f"--out {out}: cannot write there ({e.strerror or e})")
        with fout, progress_bar("z3", total=len(records)) as bar:
            for rec in verify_records(records, timeout_ms=timeout_ms):
                fout.write(json.dumps(rec, ensure_ascii=False) + "\n")
                counts[rec["z3_status"]] = counts.get(rec["z3_status"], 0) + 1
                bar()
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    emit_summary({"command": "z3", "records": len(records), "z3_status": counts, "out": str(out),
                  "wall_s": round(time.perf_counter() - t0, 3)})
