"""`legival grade`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app
from legival.console import emit_summary, fail, progress_bar


@app.command()
def grade(
    file: Annotated[Path, typer.Argument(help="JSONL records with 'pred' and 'gold' fields.")],
    dataset: Annotated[str, typer.Option(help="Dataset whose grader to use (gsm8k, math, gpqa, lsat, connections).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL: the records plus 'equivalent' and 'grade_status'.")],
    role: Annotated[str, typer.Option(help="teacher: last answer wins; student: first explicit answer wins.")] = "teacher",
) -> None:
    """Batch-grade predictions against gold answers with Legi-Val's graders."""
    from legival_core.registry import UnknownName
    from legival_core.stages.batch_grade import BatchGradeError, grade_jsonl

    if role not in ("teacher", "student"):
        fail(f"--role must be 'teacher' or 'student', not {role!r}")
    t0 = time.perf_counter()
    try:
        with progress_bar("grade") as advance:
            counts = grade_jsonl(file, dataset, out, role=role, progress=advance)  # type: ignore[arg-type]
    except (BatchGradeError, UnknownName) as e:
        fail(str(e))
    emit_summary({"command": "grade", "out": str(out), **counts, "wall_s": round(time.perf_counter() - t0, 3)})
