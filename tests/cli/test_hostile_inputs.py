"""The acceptance test of issue 26: 200 real traces plus 3 hostile ones (a 30 MB repetition loop, broken
Unicode, a 150 KB repetition) through ingest, efficiency, transfer (the embedded student, a small
limit), quality and report. Every command exits 0; the 200 are computed exactly as without the
hostile ones; each hostile one is computed, failed or skipped, with its reason in coverage.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.catalog import MINILM
from legival_core.store import Store
from tests._cli import Ran, legival
from tests._sql import rows

pytestmark = pytest.mark.slow

TEACHERS = ("deepseek-r1-distill-qwen-14b", "deepseek-r1-distill-qwen-32b")
TRANSFER = ("--limit", "1", "--max-new-tokens", "8", "--step-interval", "40", "--traces-per-chunk", "2")


def ok(p: Ran) -> dict[str, Any]:
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.summary()


def hostile_records(real: dict[str, Any]) -> list[dict[str, Any]]:
    """Degenerate outputs as a paper-scale run meets them, each of its own teacher and problem (so
    that per-problem normalisations of the real teachers are untouched)."""
    def rec(teacher: str, reasoning: str, n: int, loop: bool) -> dict[str, Any]:
        r = {**real, "model": teacher, "problem_id": f"hostile-{n}", "reasoning": reasoning}
        # a repetition loop runs until the token budget: cut off, no answer (as generated, never correct)
        return {**r, "truncated": True, "response": ""} if loop else r

    broken = str(real["reasoning"])
    return [rec("hostile-30mb", "Let me think. " * (30_000_000 // 14), 1, True),
            rec("hostile-unicode", broken[:200] + "\ud800 \x00" + broken[200:], 2, False),
            rec("hostile-150kb", "?! x " * (150_000 // 5), 3, True)]


def run_all(db: Path, files: list[Path]) -> dict[str, dict[str, Any]]:
    out = {"ingest": ok(legival("ingest", *files, "--db", db, "--repair-text"))}
    out["efficiency"] = ok(legival("efficiency", "--db", db))
    out["transfer"] = ok(legival("transfer", "--db", db, *TRANSFER))
    # cohesion on the efficiency stage's model: the step vectors come from the shared cache (hostile
    # traces included), not a second, larger model's 25 s over the same steps
    out["quality"] = ok(legival("quality", "--db", db, "--metrics", "cohesion", "--embed-model", MINILM))
    out["report"] = ok(legival("report", "--db", db, "--out", db.parent / "report", "--resamples", "0"))
    return out


def stored(db: Path, real: set[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Every per-trace row of the real teachers' traces."""
    with Store(db, read_only=True) as s:
        ids = [t for (t,) in rows(s, "SELECT trace_id FROM traces WHERE list_contains(?, teacher)", [sorted(real)])]
        q = {"trace_metrics": "SELECT trace_id, metric, params, value, status FROM trace_metrics",
             "steps": "SELECT trace_id, idx, start_char, end_char FROM steps",
             "step_similarity": "SELECT * FROM step_similarity",
             "rollouts": "SELECT trace_id, student_key, k, sample, continuation, correct FROM rollouts",
             "grades": "SELECT trace_id, grader, extracted, correct, status FROM grades"}
        return {name: sorted(r for r in rows(s, sql) if r[0] in set(ids)) for name, sql in q.items()}


def same(a: dict[str, list[tuple[Any, ...]]], b: dict[str, list[tuple[Any, ...]]]) -> None:
    """Equal rows, floats within 1e-6: the sentences of a batch are embedded together, and which other
    traces share the batch changes the BLAS summation order (differences of ~1e-7), nothing more."""
    assert a.keys() == b.keys()
    for table in a:
        assert len(a[table]) == len(b[table]) > 0 or table == "rollouts", table
        for x, y in zip(a[table], b[table], strict=True):
            assert len(x) == len(y)
            for u, v in zip(x, y, strict=True):
                if isinstance(u, float) and isinstance(v, float):
                    assert u == pytest.approx(v, abs=1e-6), (table, x, y)
                else:
                    assert u == v, (table, x, y)
    assert a["rollouts"], "no rollout: the transfer was not exercised"


def coverage(report: Path) -> list[dict[str, str]]:
    with (report / "coverage.csv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_200_real_traces_are_computed_as_without_3_hostile_ones(tmp_path: Path, shared_data: Path) -> None:
    source = shared_data / "reasoning_traces" / "gsm8k"
    real = [json.loads(x) for t in TEACHERS for x in (source / f"{t}.jsonl").read_text().splitlines()[:100]]
    assert len(real) == 200
    clean_file, hostile_file = tmp_path / "real.jsonl", tmp_path / "hostile.jsonl"
    clean_file.write_text("".join(json.dumps(r) + "\n" for r in real), encoding="utf-8")
    hostile_file.write_text("".join(json.dumps(r) + "\n" for r in hostile_records(real[0])), encoding="utf-8")
    (tmp_path / "clean").mkdir()
    (tmp_path / "hostile").mkdir()
    clean_db, hostile_db = tmp_path / "clean" / "s.duckdb", tmp_path / "hostile" / "s.duckdb"

    run_all(clean_db, [clean_file])
    h = run_all(hostile_db, [clean_file, hostile_file])
    assert (h["ingest"]["too_large"], h["ingest"]["repaired_text"]) == (1, 1)

    teachers = {str(r["model"]) for r in real}
    same(stored(hostile_db, teachers), stored(clean_db, teachers))

    cov = coverage(tmp_path / "hostile" / "report")
    big = [r for r in cov if r["teacher"] == "hostile-30mb"]
    assert big and all(r["status"] == "failed" and "skipped at ingest" in r["detail"]
                       and "over the limit" in r["detail"] for r in big), big[:3]
    for teacher in ("hostile-unicode", "hostile-150kb"):  # stored: computed, or failed with a reason
        cells = [r for r in cov if r["teacher"] == teacher]
        assert cells and all(r["status"] != "not run" for r in cells if r["stage"] == "efficiency"), cells[:5]
    clean_cov = {(r["teacher"], r["metric"]): r for r in coverage(tmp_path / "clean" / "report")}
    for r in cov:
        if r["teacher"] in teachers:
            assert (r["status"], r["n"]) == (clean_cov[(r["teacher"], r["metric"])]["status"],
                                             clean_cov[(r["teacher"], r["metric"])]["n"]), r
