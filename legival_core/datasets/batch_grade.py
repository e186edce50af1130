"""`legival grade`: grade user records ({pred, gold, ...}) with our graders, so users can compare
Legi-Val's graders with their own on their own data. Other fields pass through unchanged.

`pred` is read as the answer itself or as a full response (`pred_format`, rule in
`legival_core.grading.grader.PRED_FORMAT_RULE`). The input is read and checked in full before the
output is written, and the output appears whole or not at all (written to `OUT.tmp`, renamed at
the end, removed on any failure).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legival_core.datasets.base import Role, get_dataset
from legival_core.grading.grader import DEFAULT_PRED_FORMAT, PRED_FORMATS, PredFormat, grade_pred
from legival_core.readers.input_files import InputFileError
from legival_core.readers.records import LineProblem, read_jsonl_records
from legival_core.types import Problem


class BatchGradeError(ValueError):
    pass


def grade_record(rec: dict[str, Any], dataset: str, role: Role = "teacher",
                 pred_format: PredFormat = DEFAULT_PRED_FORMAT) -> dict[str, Any]:
    spec = get_dataset(dataset)
    problem = Problem(spec.name, str(rec.get("problem_id", rec.get("id", ""))), str(rec.get("question", "")),
                      str(rec["gold"]), tuple(rec.get("choices") or ()))
    g, read_as = grade_pred(spec.grader, str(rec["pred"]), problem, role, pred_format)
    return {**rec, "equivalent": bool(g.correct), "grade_status": g.status, "extracted": g.extracted,
            "pred_read_as": read_as}


def read_grade_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a `legival grade` input file (JSONL, plain or gzip/zstd-compressed: `input_files`),
    checked; BatchGradeError names file, line, field, or says what the file is when it is no JSONL."""
    records: list[dict[str, Any]] = []
    try:
        for i, rec in read_jsonl_records(path):
            if isinstance(rec, LineProblem):
                raise BatchGradeError(f"{path}:{i}: field '{rec.field}': {rec.message}")
            for f in ("pred", "gold"):
                if rec.get(f) is None:
                    raise BatchGradeError(f"{path}:{i}: field '{f}': required field is missing")
                if isinstance(rec[f], dict | list):
                    raise BatchGradeError(f"{path}:{i}: field '{f}': expected a string or a number, "
                                          f"got a JSON {'object' if isinstance(rec[f], dict) else 'list'}")
            records.append(rec)
    except InputFileError as e:
        raise BatchGradeError(str(e)) from None
    return records


def check_output_path(out: Path) -> None:
    """Refuse an output path that cannot be written before any grading starts."""
    if out.is_dir():
        raise BatchGradeError(f"--out {out}: is a directory (give the output file's path)")
    if not out.parent.is_dir():
        raise BatchGradeError(f"--out {out}: the directory {out.parent} does not exist")


def grade_jsonl(
    path: Path, dataset: str, out: Path, role: Role = "teacher", progress: Callable[[int], None] | None = None,
    pred_format: PredFormat = DEFAULT_PRED_FORMAT,
) -> dict[str, int]:
    """Grade every line of `path` into `out`. The input is validated in full before `out` is written,
    so a bad line leaves no half-written output (and never a `.tmp` file)."""
    get_dataset(dataset)  # unknown dataset: fail before reading anything
    if pred_format not in PRED_FORMATS:
        raise BatchGradeError(f"--pred-format must be one of {', '.join(PRED_FORMATS)}, not {pred_format!r}")
    records = read_grade_records(path)
    check_output_path(out)
    counts = {"records": 0, "equivalent": 0, "ok": 0, "unparsed": 0, "timeout": 0,
              "read_as_answer": 0, "read_as_response": 0}
    tmp = out.with_name(out.name + ".tmp")
    try:
        try:
            fh = tmp.open("w", encoding="utf-8")
        except OSError as e:
            raise BatchGradeError(f"--out {out}: cannot write there ({e.strerror or e})") from None
        with fh:
            for rec in records:
                graded = grade_record(rec, dataset, role, pred_format)
                fh.write(json.dumps(graded, ensure_ascii=False) + "\n")
                counts["records"] += 1
                counts["equivalent"] += graded["equivalent"]
                counts[graded["grade_status"]] = counts.get(graded["grade_status"], 0) + 1
                counts[f"read_as_{graded['pred_read_as']}"] += 1
                if progress:
                    progress(1)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return counts
