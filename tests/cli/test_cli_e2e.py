"""End to end through the command line: ingest -> efficiency -> report on real traces. The commands run
in-process through the typer app (tests/_cli.py); `test_cli_on_bundled_traces_and_errors` goes through
the real console entry point in a subprocess."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests._cli import Ran, entry_point
from tests._cli import legival as run_legival
from tests.conftest import EXAMPLES, FIXTURES


def legival(*args: str, check: bool = True, subprocess: bool = False) -> Ran:
    p = (entry_point if subprocess else run_legival)(*args)
    if check and p.returncode != 0:
        raise AssertionError(f"legival {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def last_json(p: Ran) -> dict:
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_ingest_efficiency_report_on_shared_traces(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    sources = sorted((shared_data / "reasoning_traces" / "gsm8k").glob("deepseek-r1-distill-q*.jsonl"))[:2]
    sources.append(shared_data / "reasoning_traces" / "math500" / "deepseek-r1-distill-qwen-14b.jsonl")
    files = []
    for src in sources:  # the first 40 real traces of each file keep this test to seconds
        dst = tmp_path / f"{src.parent.name}-{src.name}"
        dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:40]), encoding="utf-8")
        files.append(dst)
    s = last_json(legival("ingest", *map(str, files), "--db", str(db)))
    n = s["new_traces"]
    assert n == sum(1 for f in files for _ in f.open())
    assert last_json(legival("ingest", *map(str, files), "--db", str(db)))["new_traces"] == 0
    eff = last_json(legival("efficiency", "--db", str(db)))
    assert eff["redundancy_rows"] == n
    rep = legival("report", "--db", str(db), "--out", str(tmp_path / "r"))
    assert "teacher_dataset_metrics.csv" in last_json(rep)["files"]
    rows = list(csv.DictReader((tmp_path / "r" / "teacher_dataset_metrics.csv").open()))
    assert {r["dataset"] for r in rows} == {"gsm8k", "math"}
    for r in rows:
        assert 0 < float(r["accuracy"]) <= 1 and float(r["token_len_median"]) > 10
    assert "teacher x dataset" in rep.stdout


def test_cli_on_bundled_traces_and_errors(tmp_path: Path) -> None:
    db = tmp_path / "b.duckdb"
    legival("ingest", str(EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"), "--db", str(db), subprocess=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"model": "x"}\n', encoding="utf-8")
    p = legival("ingest", str(bad), "--db", str(db), check=False, subprocess=True)
    assert p.returncode == 2
    assert f"{bad}:1: field 'dataset'" in p.stderr and "Traceback" not in p.stderr
    p = legival("grade", str(bad), "--dataset", "gsm8k", "--out", str(tmp_path / "o.jsonl"), check=False,
                subprocess=True)
    assert p.returncode == 2 and "field 'pred'" in p.stderr


def test_grade_command(tmp_path: Path) -> None:
    f = tmp_path / "g.jsonl"
    recs = [
        {"id": 1, "pred": "so \\boxed{\\dfrac{1}{2}}", "gold": "0.5", "note": "kept"},
        {"id": 2, "pred": "\\boxed{3}", "gold": "4"},
        {"id": 3, "pred": "no answer here", "gold": "4"},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    s = last_json(legival("grade", str(f), "--dataset", "math", "--out", str(out)))
    assert s["records"] == 3 and s["equivalent"] == 1
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [g["equivalent"] for g in got] == [True, False, False]
    assert [g["grade_status"] for g in got] == ["ok", "ok", "unparsed"]
    assert got[0]["note"] == "kept"


@pytest.mark.slow
def test_transfer_command_with_embedded_student_then_nothing_to_do(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    legival("ingest", str(EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"), "--db", str(db))
    args = ("transfer", "--db", str(db), "--teacher", "openai/gpt-oss-20b", "--limit", "1",
            "--max-new-tokens", "8", "--step-interval", "5")
    first = last_json(legival(*args))
    assert first["rollouts_total"] == first["rollouts_generated"] > 0 and first["rollouts_cached"] == 0
    second = last_json(legival(*args))
    assert second["rollouts_generated"] == 0 and second["rollouts_cached"] == first["rollouts_total"]


def test_z3_command_on_published_records(tmp_path: Path) -> None:
    src = FIXTURES / "z3"
    files = sorted(src.glob("*.jsonl"))
    assert files, "the z3 fixture is part of the repo"
    lines = [ln for ln in files[0].read_text(encoding="utf-8").splitlines() if ln.strip()]
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join([*lines, json.dumps({"id": "no-ir"})]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    s = last_json(legival("z3", str(f), "--out", str(out)))
    got = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert s["records"] == len(got) == len(lines) + 1
    for rec, src_line in zip(got, lines, strict=False):
        want = json.loads(src_line)
        assert rec["acs"] == pytest.approx(want["acs"], abs=1e-9)
        for key in ("fas0", "jss", "rcr", "z3_status"):
            assert key in rec
    assert got[-1]["z3_status"] == "invalid_ir" and got[-1]["id"] == "no-ir"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n{oops\n", encoding="utf-8")
    p = legival("z3", str(bad), "--out", str(tmp_path / "o2.jsonl"), check=False)
    assert p.returncode == 2 and f"{bad}:2: field '<json>'" in p.stderr
    assert not (tmp_path / "o2.jsonl").exists()
