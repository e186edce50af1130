"""Teacher generation through the orchestration layer: the `generate` flow, `legival run` with a
generating teacher next to a trace-file teacher, and `legival generate --spec` (scripted-demo backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from legival_core.run_config import SpecError, parse_spec
from tests.conftest import FIXTURES
from tests.flows._orchestration import prefect_harness, ray_down, table_snapshot, write_spec  # noqa: F401

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"
GEN = {"backend": "scripted-demo", "model": "scripted-demo", "problems": str(GSM8K), "limit": 2,
       "max_new_tokens": 32, "batch_size": 1}


pytestmark = pytest.mark.usefixtures("prefect_harness", "ray_down")


def _mixed_spec(folder: Path) -> Path:
    path = write_spec(folder, ["qwen3-4b"], transfer={"enabled": False})
    spec = yaml.safe_load(path.read_text())
    spec["teachers"].append({"name": "demo-gen", "generate": GEN})
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _traces(db: Path) -> dict[str, list[tuple]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT t.teacher, t.dataset, t.problem_id, g.correct IS NOT NULL "
                           "FROM traces t LEFT JOIN grades g USING (trace_id) ORDER BY 1, 3").fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r[1:])
    return out


def test_run_generates_and_ingests_then_rerun_generates_nothing(tmp_path: Path) -> None:
    from flows.benchmark import benchmark

    spec = _mixed_spec(tmp_path)
    first = benchmark(spec=str(spec))
    assert first["generated_traces"] == 2 and first["new_traces"] == 4 + 2
    traces = _traces(tmp_path / "store.duckdb")
    assert len(traces["qwen3-4b"]) == 4 and len(traces["demo-gen"]) == 2
    # stored like ingested traces: graded, then segmented by the efficiency stage like the others
    assert all(ds == "gsm8k" and graded for ds, _, graded in traces["demo-gen"])
    assert first["efficiency"]["segmented"] == 6
    before = table_snapshot(tmp_path / "store.duckdb")

    again = benchmark(spec=str(spec))
    assert again["generated_traces"] == 0 and again["new_traces"] == 0
    assert table_snapshot(tmp_path / "store.duckdb") == before


def test_generate_cli_with_spec(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from legival.cli import app

    spec = _mixed_spec(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["generate", "--spec", str(spec), "--teacher", "demo-gen"])
    assert r.exit_code == 0, r.output
    assert '"generated": 2' in r.output and '"new_traces": 2' in r.output
    again = runner.invoke(app, ["generate", "--spec", str(spec)])
    assert again.exit_code == 0 and '"generated": 0' in again.output and '"cached": 2' in again.output
    plain = runner.invoke(app, ["generate", "--spec", str(spec), "--teacher", "qwen3-4b"])
    assert plain.exit_code == 2 and "not `generate`" in plain.output and "Traceback" not in plain.output
    assert set(_traces(tmp_path / "store.duckdb")) == {"demo-gen"}  # the trace-file teacher is not ingested


def test_generation_spec_validation(tmp_path: Path) -> None:
    base = {"datasets": ["gsm8k"], "teachers": [{"name": "g", "generate": {"backend": "vllm", "model": "m"}}]}
    s = parse_spec(base, tmp_path)  # a teacher may be declared before its problems file (add-teacher)
    g = s.teachers[0].generate
    assert g is not None
    with pytest.raises(SpecError, match=r"needs `generate.problems`"):
        g.jobs(s.datasets, "g")
    bad = {**base, "teachers": [{"name": "g", "generate": {"backend": "vllm", "model": "m", "problems": "nope.jsonl"}}]}
    with pytest.raises(SpecError, match=r"teachers.0.generate.problems: .*not found"):
        parse_spec(bad, tmp_path)
    gen: dict[str, Any] = {"backend": "vllm", "model": "m", "problems": str(GSM8K)}
    two = {"datasets": ["gsm8k", "math"], "teachers": [{"name": "g", "generate": gen}]}
    with pytest.raises(SpecError, match="one `generate.problems` file serves one dataset"):
        parse_spec(two, tmp_path)
    gen["datasets"] = ["gsm8k"]
    g2 = parse_spec(two, tmp_path).teachers[0].generate
    assert g2 is not None and g2.jobs(["gsm8k", "math"], "g") == [("gsm8k", GSM8K)]
    other = {**base, "teachers": [{"name": "g", "generate": {"backend": "vllm", "model": "m",
                                                             "problems": {"math": str(GSM8K)}}}]}
    with pytest.raises(SpecError, match="not in `datasets`"):
        parse_spec(other, tmp_path)
    assert g.decoding == "recommended" and g.seed == 0
    greedy = {**base, "teachers": [{"name": "g", "generate": {"backend": "vllm", "model": "m", "decoding": "greedy",
                                                              "seed": 3}}]}
    g3 = parse_spec(greedy, tmp_path).teachers[0].generate
    assert g3 is not None and (g3.decoding, g3.seed) == ("greedy", 3)
    typo = {**base, "teachers": [{"name": "g", "generate": {"backend": "vllm", "model": "m", "decoding": "sampled"}}]}
    with pytest.raises(SpecError, match=r"teachers.0.generate.decoding"):
        parse_spec(typo, tmp_path)


def test_early_answering_runs_beside_the_students_and_changes_no_other_number(tmp_path: Path) -> None:
    """An early-answer reader (`mode: early_answer`, `teachers: [one]`) in a run: shards only on its
    teacher, rows only in `early_answers`, a rerun computes nothing; the report's early_answering.csv
    puts its area beside the student's FOTU, and every other number is what it is without it."""
    import shutil

    import duckdb
    import polars as pl

    from flows.benchmark import benchmark
    from tests._cli import legival

    path = write_spec(tmp_path, ["qwen3-4b", "r1-qwen-7b"], limit=2)
    spec = yaml.safe_load(path.read_text())
    spec["students"].append({"name": "early-qwen", "backend": "scripted-demo", "model": "scripted-demo-v1",
                             "mode": "early_answer", "teachers": ["qwen3-4b"]})
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    planned = legival("plan", path)
    assert planned.returncode == 0, planned.stderr
    shards = {(s["teacher"], s["student"]) for s in planned.summary()["plan"]["shards"]}
    assert ("qwen3-4b", "early-qwen") in shards and ("r1-qwen-7b", "early-qwen") not in shards
    first = benchmark(spec=str(path))
    db = tmp_path / "store.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    try:
        early = con.execute("SELECT DISTINCT t.teacher FROM early_answers e JOIN traces t USING (trace_id)").fetchall()
        n_early = con.execute("SELECT count(*) FROM early_answers").fetchone()
        keys = {r[0] for r in con.execute("SELECT DISTINCT student_key FROM rollouts").fetchall()}
    finally:
        con.close()
    assert early == [("qwen3-4b",)] and n_early is not None and n_early[0] > 0 and len(keys) == 1
    again = benchmark(spec=str(path))
    assert again["rollouts_generated"] == 0 and again["rollouts_cached"] == first["rollouts_total"]

    table = pl.read_csv(tmp_path / "report" / "early_answering.csv")
    area = table.filter(pl.col("section") == "area")
    assert set(zip(area["teacher"], area["reader"], area["kind"], strict=True)) == {
        ("qwen3-4b", "early-qwen", "early_answer"), ("qwen3-4b", "scripted", "transfer")}
    assert table.filter((pl.col("section") == "curve") & (pl.col("reader") == "early-qwen"))["bin"].to_list() == \
        list(range(1, 51))
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'id="pf-early"' in page and 'data-name="early_answering.png"' in page

    # every other number as without the reader: its rows removed, the report's files are the same
    bare = tmp_path / "bare.duckdb"
    shutil.copy(db, bare)
    con = duckdb.connect(str(bare))
    try:
        con.execute("DELETE FROM early_answers")
    finally:
        con.close()
    for store, out in ((db, "with"), (bare, "without")):
        assert legival("report", "--db", store, "--out", tmp_path / out, "--resamples", "50").returncode == 0
    for name in ("teacher_metrics.csv", "teacher_dataset_student_metrics.csv", "tu_curves.csv", "coverage.csv"):
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes(), name
    assert pl.read_csv(tmp_path / "without" / "early_answering.csv")["status"][0].startswith("not run: set")
