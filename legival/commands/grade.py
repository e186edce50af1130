"""`legival grade`: batch-grade a file of predictions, or grade a store's traces (the grade stage)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app, open_store
from legival.console import emit_summary, err_console, fail, progress_bar
from legival.paths import Role
from legival_core.grading.grader import DEFAULT_PRED_FORMAT, PRED_FORMAT_RULE, PRED_FORMATS


@app.command()
def grade(
    file: Annotated[Path | None, typer.Argument(help="JSONL records with 'pred' and 'gold' fields."), Role.INPUT] = None,
    dataset: Annotated[str | None, typer.Option(
        help="Dataset whose grader to use (`legival list datasets`).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Output JSONL: the records plus 'equivalent' and 'grade_status'."), Role.OUTPUT_FILE] = None,
    role: Annotated[str, typer.Option(help="teacher: last answer wins; student: first explicit answer wins.")] = "teacher",
    pred_format: Annotated[str, typer.Option(
        "--pred-format", help=f"How to read 'pred'. {PRED_FORMAT_RULE}.")] = DEFAULT_PRED_FORMAT,
    db: Annotated[Path | None, typer.Option(
        "--db", help="Instead of a FILE: grade the store's traces that have no grade by the current grader of "
                     "their dataset (e.g. after a grader version bump; nothing is re-ingested)."), Role.STORE] = None,
) -> None:
    """Batch-grade predictions against gold answers with Legi-Val's graders (FILE --dataset --out),
    or grade a store's traces that lack a current grade (--db). A bare answer in 'pred' (`18`,
    `\\frac{1}{2}`) is graded as the answer, a full response by its answer marker (--pred-format)."""
    if db is not None:
        if file is not None or dataset is not None or out is not None:
            fail("give either FILE --dataset D --out OUT, or --db DB (not both)")
        _grade_store(db)
        return
    missing = [n for n, v in (("FILE", file), ("--dataset", dataset), ("--out", out)) if v is None]
    if missing:
        fail(f"give FILE --dataset D --out OUT (missing {', '.join(missing)}), or --db DB")
    assert file is not None and dataset is not None and out is not None
    from legival_core.datasets.batch_grade import BatchGradeError, grade_jsonl
    from legival_core.registry import UnknownName

    if role not in ("teacher", "student"):
        fail(f"--role must be 'teacher' or 'student', not {role!r}")
    if pred_format not in PRED_FORMATS:
        fail(f"--pred-format must be one of {', '.join(PRED_FORMATS)}, not {pred_format!r}")
    t0 = time.perf_counter()
    try:
        with progress_bar("grade") as advance:
            counts = grade_jsonl(file, dataset, out, role=role, progress=advance,  # type: ignore[arg-type]
                                 pred_format=pred_format)  # type: ignore[arg-type]
    except (BatchGradeError, UnknownName) as e:
        fail(str(e))
    if counts["records"] == 0:
        err_console.print(f"warning: {file}: no records (the file is empty or holds only blank lines); {out} is empty",
                          markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "grade", "out": str(out), "pred_format": pred_format, **counts,
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _grade_store(db: Path) -> None:
    from legival_core.stages.grade import grade_store

    t0 = time.perf_counter()
    with open_store(db) as store, progress_bar("grade") as bar:
        s = grade_store(store, progress=lambda done, total: bar.update(done=done, total=total))
    emit_summary({"command": "grade", "db": str(db), **s.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)})
