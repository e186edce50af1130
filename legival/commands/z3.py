"""`legival z3`: Z3 logical verification (gCoT) of records with an `ir` field."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, fail, progress_bar
from legival_core.quality.z3_ir import DEFAULT_TIMEOUT_MS


@app.command()
def z3(
    file: Annotated[Path, typer.Argument(help="JSONL records with an 'ir' field (gCoT published format).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL with acs, fas0, jss, rcr, z3_status added.")],
    timeout_ms: Annotated[int, typer.Option(help="Z3 time limit per check.")] = DEFAULT_TIMEOUT_MS,
) -> None:
    """Z3 logical verification of arithmetic IRs; one output record per input record."""
    from legival_core.quality.z3_verify import verify_records

    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    try:
        lines = file.read_bytes().split(b"\n")
    except OSError as e:
        fail(f"{file}: {e.strerror}")
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(f"{file}:{i}: field '<encoding>': invalid UTF-8 at column {e.start + 1}")
        except json.JSONDecodeError as e:
            fail(f"{file}:{i}: field '<json>': malformed JSON: {e.msg}")
        if not isinstance(rec, dict):
            fail(f"{file}:{i}: field '<json>': each line must be a JSON object")
        records.append(rec)
    counts: dict[str, int] = {}
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fout, progress_bar("z3", total=len(records)) as bar:
        for rec in verify_records(records, timeout_ms=timeout_ms):
            fout.write(json.dumps(rec, ensure_ascii=False) + "\n")
            counts[rec["z3_status"]] = counts.get(rec["z3_status"], 0) + 1
            bar()
    tmp.replace(out)
    emit_summary({"command": "z3", "records": len(records), "z3_status": counts, "out": str(out),
                  "wall_s": round(time.perf_counter() - t0, 3)})
