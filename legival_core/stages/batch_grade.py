"""`legival grade`: grade user records ({pred, gold, ...}) with our graders, so users can compare
Legi-Val's graders with their own on their own data. Other fields pass through unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legival_core.datasets.base import Role, get_dataset
from legival_core.types import Problem


class BatchGradeError(ValueError):
    pass


def grade_record(rec: dict[str, Any], dataset: str, role: Role = "teacher") -> dict[str, Any]:
    spec = get_dataset(dataset)
    problem = Problem(spec.name, str(rec.get("problem_id", rec.get("id", ""))), str(rec.get("question", "")),
                      str(rec["gold"]), tuple(rec.get("choices") or ()))
    g = spec.grader(str(rec["pred"]), "", problem, role)
    return {**rec, "equivalent": bool(g.correct), "grade_status": g.status, "extracted": g.extracted}


def grade_jsonl(
    path: Path, dataset: str, out: Path, role: Role = "teacher", progress: Callable[[int], None] | None = None
) -> dict[str, int]:
    """Grade every line of `path` into `out`. The input is validated in full before `out` is written,
    so a bad line leaves no half-written output."""
    get_dataset(dataset)  # unknown dataset: fail before reading anything
    records: list[dict[str, Any]] = []
    data = path.read_bytes()
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise BatchGradeError(f"{path}:{i}: field '<encoding>': invalid UTF-8 at column {e.start + 1}") from None
        except json.JSONDecodeError as e:
            raise BatchGradeError(f"{path}:{i}: field '<json>': malformed JSON: {e.msg}") from None
        if not isinstance(rec, dict):
            raise BatchGradeError(f"{path}:{i}: field '<json>': each line must be a JSON object")
        for f in ("pred", "gold"):
            if rec.get(f) is None:
                raise BatchGradeError(f"{path}:{i}: field '{f}': required field is missing")
        records.append(rec)
    counts = {"records": 0, "equivalent": 0, "ok": 0, "unparsed": 0, "timeout": 0}
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records:
            graded = grade_record(rec, dataset, role)
            fh.write(json.dumps(graded, ensure_ascii=False) + "\n")
            counts["records"] += 1
            counts["equivalent"] += graded["equivalent"]
            counts[graded["grade_status"]] = counts.get(graded["grade_status"], 0) + 1
            if progress:
                progress(1)
    tmp.replace(out)
    return counts
