"""Flows on a real Prefect (test harness) and a real local Ray, with the scripted student."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.flows._orchestration import prefect_harness, ray_down, table_snapshot, write_spec  # noqa: F401

pytestmark = pytest.mark.usefixtures("prefect_harness", "ray_down")


def _rollouts_by_teacher(db: Path) -> dict[str, int]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute(
            "SELECT t.teacher, count(*) FROM rollouts r JOIN traces t USING (trace_id) GROUP BY 1").fetchall())
    finally:
        con.close()


def _check_timings(db: Path, run: dict) -> None:
    """Issue 28: the run's transfer time against its plan (the scripted model has no throughput row:
    no estimate), and one `transfer_timings` row per committed batch under the run's id."""
    import duckdb

    pva = run["plan_vs_actual"]
    assert pva["wall_s"]["planned"] is None and pva["wall_s"]["actual"] > 0
    assert {x["shard"] for x in pva["shards"]} == {"gpt-oss-20b x gsm8k x scripted", "qwen3-4b x gsm8k x scripted"}
    assert all(x["planned_s"] is None and x["actual_s"] >= 0 for x in pva["shards"])
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT source, accelerator, sum(rollouts), sum(chunks), min(compute_s) FROM "
                           "transfer_timings WHERE run_id = ? GROUP BY ALL", [run["run_id"]]).fetchall()
    finally:
        con.close()
    assert len(rows) == 1 and rows[0][:3] == ("run", "cpu", run["rollouts_generated"]) and rows[0][3] >= 2
    assert rows[0][4] > 0


def test_benchmark_flow_then_cached_then_added_teacher_then_new_tau(tmp_path: Path) -> None:
    from flows.benchmark import benchmark

    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b"], engines=2)
    first = benchmark(spec=str(spec))
    assert first["rollouts_total"] == first["rollouts_generated"] > 0 and first["rollouts_cached"] == 0
    assert first["engines_loaded"] >= 1 and first["judge_calls"] == 0
    assert (tmp_path / "report" / "teacher_dataset_metrics.csv").is_file()
    assert list(first["stage_s"]) == ["ingest", "grade", "efficiency", "transfer", "judge", "step_events", "report", "shutdown"]
    # the plan made inside the run (`legival plan` on the store) is what the run then generated
    assert first["plan_vs_actual"]["rollouts"] == {"planned": first["rollouts_generated"],
                                                   "actual": first["rollouts_generated"]}
    assert first["plan_vs_actual"]["prompt_tokens"]["actual"] > 0
    _check_timings(tmp_path / "store.duckdb", first)
    import ray

    assert not ray.is_initialized()  # the transfer flow stopped its engines and the Ray it started
    before = table_snapshot(tmp_path / "store.duckdb")

    again = benchmark(spec=str(spec))
    assert again["rollouts_generated"] == 0 and again["rollouts_cached"] == first["rollouts_total"]
    assert again["engines_loaded"] == 0 and again["new_traces"] == 0
    assert {k: again["plan_vs_actual"][k] for k in ("rollouts", "prompt_tokens")} == {
        "rollouts": {"planned": 0, "actual": 0}, "prompt_tokens": {"planned": 0, "actual": 0}}
    assert again["plan_vs_actual"]["wall_s"]["planned"] is None  # no throughput row for the scripted model
    assert table_snapshot(tmp_path / "store.duckdb") == before

    # run records: the second run reported exactly what the first did (issue 17)
    assert (first["run_seq"], again["run_seq"]) == (1, 2)
    assert first["changes"].startswith("changes since the last run: none to show (needs two recorded runs")
    assert again["changes"].startswith(f"run #1 {first['run_id']} -> #2 {again['run_id']}: 0 changed values/ranks")
    assert pl.read_csv(tmp_path / "report" / "diff.csv").height == 0

    per_teacher = _rollouts_by_teacher(tmp_path / "store.duckdb")
    from typer.testing import CliRunner

    from legival.cli import app
    from tests.flows._orchestration import MODELS

    cli = CliRunner().invoke(app, ["add-teacher", "r1-qwen-7b", "--traces", str(tmp_path / "traces.jsonl"),
                                   "--select", MODELS["r1-qwen-7b"], "--spec", str(spec),
                                   "--prefect-file", str(tmp_path / "prefect.yaml")])
    assert cli.exit_code == 0, cli.output
    added = benchmark(spec=str(spec))
    after = _rollouts_by_teacher(tmp_path / "store.duckdb")
    assert {k: after[k] for k in per_teacher} == per_teacher  # old teachers: nothing new
    assert added["rollouts_generated"] == after["r1-qwen-7b"] > 0
    assert added["rollouts_cached"] == first["rollouts_total"]
    assert added["plan_vs_actual"]["rollouts"]["planned"] == added["rollouts_generated"]
    _check_added_teacher_diff(tmp_path, added)


    # Each run has its own artifacts: the overall progress (done) and the shards' (a rerun in the
    # same process creates new ones instead of updating the first run's).
    from tasks.progress import artifact_key

    run_key, shard_key = "benchmark-legival", artifact_key("gpt-oss-20b x gsm8k x scripted")
    by_key = _artifacts([run_key, shard_key, "ranking-legival", "plan-legival", "plan-vs-actual-legival"])
    assert len(by_key["plan-legival"]) == 3 and all("| total |" in str(a.data) for a in by_key["plan-legival"])
    # the transfer's time, planned (none: no throughput row for the scripted model) and actual, per run
    pva = by_key["plan-vs-actual-legival"]
    assert len(pva) == 3 and all("| gpt-oss-20b x gsm8k x scripted | - |" in str(a.data) for a in pva)
    assert all("Wall time of the transfer (engine start included): planned -, actual" in str(a.data) for a in pva)
    assert [float(a.data) for a in by_key[run_key]] == [100.0] * 3
    assert {a.flow_run_id for a in by_key[run_key]} == {a.flow_run_id for a in by_key["ranking-legival"]}
    assert len(by_key[shard_key]) == 3 and len({a.flow_run_id for a in by_key[shard_key]}) == 3
    latest = max(by_key["ranking-legival"], key=lambda a: a.created)
    assert "| r1-qwen-7b |" in str(latest.data) and "| teacher | accuracy" in str(latest.data)

    # efficiency.tau changed: only redundancy is recomputed, and the diff says why for every teacher
    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b", "r1-qwen-7b"], engines=2, efficiency={"tau": 0.5})
    retau = benchmark(spec=str(spec))
    eff = retau["efficiency"]
    assert eff["redundancy_rows"] == 12 and eff["length_rows"] == 0 and eff["encoded_sentences"] == 0
    assert retau["rollouts_generated"] == 0 and retau["new_traces"] == 0 and retau["engines_loaded"] == 0
    d = pl.read_csv(tmp_path / "report" / "diff.csv")
    values = d.filter(pl.col("change") == "changed")
    assert set(values["metric"]) == {"redundancy"}
    assert set(values.filter(pl.col("dataset") == "all")["teacher"]) == {"gpt-oss-20b", "qwen3-4b", "r1-qwen-7b"}
    assert set(d["cause"]) <= {"parameters changed: redundancy (tau 0.8 -> 0.5)", "other teachers' values changed"}


def _check_added_teacher_diff(tmp_path: Path, added: dict) -> None:
    """After add-teacher: the run's diff (diff.csv, `legival diff`, the dashboard, the artifact) lists
    the new teacher and the rank changes it caused, with that as their cause."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    assert "teachers added: r1-qwen-7b" in added["changes"]
    d = pl.read_csv(tmp_path / "report" / "diff.csv")
    assert d.filter(pl.col("change") == "teacher added")["teacher"].to_list() == ["r1-qwen-7b"]
    moved = d.filter(pl.col("change") != "teacher added")
    assert moved.height > 0 and set(moved["cause"]) == {"teachers added: r1-qwen-7b"}
    assert set(moved["teacher"]) <= {"gpt-oss-20b", "qwen3-4b"}
    ranks = moved.filter(pl.col("change") == "rank")
    assert ranks.height > 0 and (ranks["rank_old"] != ranks["rank_new"]).all()
    # the old teachers' own values stay; only the length normalised by the mean over teachers moves
    assert set(moved.filter(pl.col("change") == "changed")["metric"]) <= {"token_len_norm"}
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'id="changes"' in page and "teachers added: r1-qwen-7b" in page
    p = subprocess.run([sys.executable, "-m", "legival", "diff", "--db", str(tmp_path / "store.duckdb")],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    assert summary["teachers_added"] == ["r1-qwen-7b"] and summary["changes"] == moved.height
    runs = subprocess.run([sys.executable, "-m", "legival", "runs", "--db", str(tmp_path / "store.duckdb")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    rows = json.loads(runs.stdout.splitlines()[-1])["runs"]
    assert [r["seq"] for r in rows] == [1, 2, 3] and all(r["flow_run_id"] for r in rows)
    assert rows[2]["new_traces"] == 4 and rows[1]["rollouts_generated"] == 0
    art = max(_artifacts(["changes-legival"])["changes-legival"], key=lambda a: a.created)
    assert "r1-qwen-7b" in str(art.data) and "# Changes since the last run" in str(art.data)


def _artifacts(keys: list[str]) -> dict[str, list]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as c:
        arts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return {k: [a for a in arts if a.key == k] for k in keys}


def test_progress_artifact_per_shard(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from flows.transfer import transfer
    from tasks.progress import artifact_key

    spec = write_spec(tmp_path, ["gpt-oss-20b"])
    res = transfer(spec=str(spec))  # an empty store: nothing to roll out, the artifact says 0 / 0
    key = artifact_key("gpt-oss-20b x gsm8k x scripted")
    assert key == "transfer-gpt-oss-20b-x-gsm8k-x-scripted"
    arts = _artifacts([key])[key]
    assert arts, f"no artifact {key}"
    art = max(arts, key=lambda a: a.created)  # this run's (earlier tests made their own)
    assert art.type == "progress" and float(str(art.data)) == 100.0
    assert f"{res['rollouts_total']} / {res['rollouts_total']}" in (art.description or "")
    with get_client(sync_client=True) as c:
        run = c.read_flow_run(art.flow_run_id)
    assert run.name == "transfer legival" and {"spec:legival", "teacher:gpt-oss-20b"} <= set(run.tags)


def test_small_shards_commit_per_trace(tmp_path: Path) -> None:
    """A shard of fewer traces than `traces_per_chunk` (the demo's 17-rollout shard: 2 traces, one
    chunk) commits once per trace, so its progress moves, while a chunk keeps about 8 rollouts (a
    7-rollout shard stays one batch) and a large shard keeps its chunk size (batching)."""
    from legival_core.run_config import student_config
    from legival_core.stages.base import run_stage
    from legival_core.stages.ingest import ingest_file
    from legival_core.stages.transfer import TransferStage, shard_chunk
    from legival_core.store import Store
    from legival_core.transfer.students import make_student_backend
    from tasks.transfer import ShardStage
    from tests.flows._orchestration import small_traces

    cases = [(2, 17, 2), (2, 7, 2), (3, 27, 4), (4, 16, 4), (50, 850, 16), (1000, 17000, 16), (0, 0, 4)]
    assert [shard_chunk(*c) for c in cases] == [1, 2, 1, 2, 6, 16, 4]
    config = student_config(name="s", backend="scripted-demo", model="scripted-demo-v1", max_new_tokens=24)
    with Store(tmp_path / "s.duckdb") as store:
        ingest_file(store, small_traces(tmp_path / "traces.jsonl"))
        calls: list[tuple[int, int]] = []
        stage = ShardStage(TransferStage(config, limit=1, traces_per_chunk=4, backend=make_student_backend(config)))
        s = run_stage(stage, store, None, lambda done, total: calls.append((done, total)))
        chunk = stage.plan(store).chunk_size
    assert s.transfer_traces == 3 and s.rollouts_total >= 3 * 8 and chunk == 1
    assert len(calls) == 4 and calls[0][0] == 0 and calls[-1] == (s.rollouts_total, s.rollouts_total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_run_progress_counts_stages_rollouts_and_time() -> None:
    from tasks.progress import RunProgress

    now = [0.0]
    p = RunProgress("demo", ["ingest", "efficiency", "transfer", "report"], shards_expected=2,
                    labels={"report": "the report"}, clock=lambda: now[0])
    assert p.percent() == 0.0 and "stage 1 / 4: ingest" in p.describe() and "not known yet" in p.describe()
    now[0] = 10.0
    p.stage_done("ingest")
    now[0] = 30.0
    p.stage_done("efficiency")  # typical other stage: 15 s
    assert "not known yet" in p.describe()  # transfer running, no rollout committed, no plan
    p.transfer_planned_s = 25.0  # the run's plan: 25 s of transfer
    now[0] = 35.0
    assert p.time_left() == pytest.approx(20 + 15)  # 20 s of the plan's 25 left, then the report
    p.shard("a", 5, 10, committed=0)  # 5 cached
    now[0] = 40.0
    p.shard("a", 9, 10, committed=4)  # 4 rollouts in 10 s
    p.shard("b", 0, 10, committed=0)
    assert p.rollouts() == (9, 20) and p.percent() == round(100 * (2 + 9 / 20) / 4, 2)
    assert p.time_left() == pytest.approx(11 / 0.4 + 15)  # 11 rollouts at 0.4/s, then the report at a typical 15 s
    assert "rollouts 9 / 20" in p.describe() and "elapsed 40s" in p.describe()
    p.stage_done("transfer")
    p.stage_done("report")
    assert p.percent() == 100.0 and p.describe().startswith("demo: done, 4 / 4 stages")


def test_rank_table_markdown(tmp_path: Path) -> None:
    from tasks.prefect_ui import ranking_markdown

    (tmp_path / "teacher_metrics.csv").write_text(
        "teacher,accuracy,rank_accuracy,token_len_median,rank_token_len_median,sotu,on_pareto_frontier\n"
        "t-b,0.5,2,120.0,1,,false\n"
        "t-a,0.9375,1,300.5,2,,true\n")
    md = ranking_markdown("demo", tmp_path, str(tmp_path / "index.html"))
    lines = md.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("| teacher"))
    assert lines[head] == "| teacher | accuracy ↑ | token_len_median ↓ | Pareto |"
    assert lines[head + 2] == "| t-a | 0.938 (1) | 300.5 (2) | yes |"
    assert lines[head + 3] == "| t-b | 0.500 (2) | 120.0 (1) |  |"
    assert f"`{tmp_path / 'index.html'}`" in md


def test_stage_flows_standalone(tmp_path: Path) -> None:
    from flows.efficiency import efficiency
    from flows.ingest import ingest
    from flows.judge import judge
    from flows.report import report

    spec = write_spec(tmp_path, ["qwen3-4b"])
    assert ingest(spec=str(spec))[0]["new_traces"] == 4
    assert efficiency(spec=str(spec))["segmented"] == 4
    assert judge(spec=str(spec))["judge_calls"] == 0
    out = report(spec=str(spec), out=str(tmp_path / "r2"))
    assert "teacher_dataset_metrics.csv" in out["files"]
    from tasks.store_lock import close_stores

    close_stores()
    import duckdb

    with duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True) as con:  # a plain report records no run
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_generating_teacher_is_not_ingested(tmp_path: Path) -> None:
    from legival_core.run_config import Teacher
    from legival_core.stages.ingest import GeneratingTeacher, ingest_teacher
    from legival_core.store import Store

    t = Teacher(name="g", generate={"backend": "vllm", "model": "Qwen/Qwen3-4B"})  # type: ignore[arg-type]
    with Store(tmp_path / "s.duckdb") as store, pytest.raises(GeneratingTeacher, match="legival generate --spec"):
        ingest_teacher(store, t)


def test_select_keeps_only_that_model(tmp_path: Path) -> None:
    from legival_core.run_config import load_spec
    from tasks.stages import run_job, stage_jobs
    from tasks.store_lock import close_stores

    spec = load_spec(write_spec(tmp_path, ["gpt-oss-20b"]))
    r = run_job(str(tmp_path / "x.duckdb"), stage_jobs("ingest", spec)[0], spec)
    close_stores()
    assert r.new_traces == 4 and r.files[0]["file"].endswith("traces.jsonl")
