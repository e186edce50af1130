"""`legival z3`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app
from legival.console import emit_summary, fail, progress_bar


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
