"""Flows on a real Prefect (test harness) and a real local Ray, with the scripted student."""

from __future__ import annotations

from pathlib import Path

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


def test_benchmark_flow_then_cached_then_added_teacher(tmp_path: Path) -> None:
    from flows.benchmark import benchmark

    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b"], engines=2)
    first = benchmark(spec=str(spec))
    assert first["rollouts_total"] == first["rollouts_generated"] > 0 and first["rollouts_cached"] == 0
    assert first["engines_loaded"] >= 1 and first["judge_calls"] == 0
    assert (tmp_path / "report" / "teacher_dataset_metrics.csv").is_file()
    assert list(first["stage_s"]) == ["ingest", "efficiency", "transfer", "judge", "quality", "aggregate", "shutdown"]
    import ray

    assert not ray.is_initialized()  # the transfer flow stopped its engines and the Ray it started
    before = table_snapshot(tmp_path / "store.duckdb")

    again = benchmark(spec=str(spec))
    assert again["rollouts_generated"] == 0 and again["rollouts_cached"] == first["rollouts_total"]
    assert again["engines_loaded"] == 0 and again["new_traces"] == 0
    assert table_snapshot(tmp_path / "store.duckdb") == before

    per_teacher = _rollouts_by_teacher(tmp_path / "store.duckdb")
    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b", "r1-qwen-7b"], engines=2)
    added = benchmark(spec=str(spec))
    after = _rollouts_by_teacher(tmp_path / "store.duckdb")
    assert {k: after[k] for k in per_teacher} == per_teacher  # old teachers: nothing new
    assert added["rollouts_generated"] == after["r1-qwen-7b"] > 0
    assert added["rollouts_cached"] == first["rollouts_total"]


def test_progress_artifact_per_shard(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.transfer import transfer
    from tasks.progress import artifact_key

    spec = write_spec(tmp_path, ["gpt-oss-20b"])
    res = transfer(spec=str(spec))
    key = artifact_key("gpt-oss-20b x gsm8k x scripted")
    with get_client(sync_client=True) as c:
        arts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert arts, f"no artifact {key}"
    assert arts[0].type == "progress" and float(str(arts[0].data)) == 100.0
    assert f"{res['rollouts_total']} / {res['rollouts_total']}" in (arts[0].description or "")


def test_stage_flows_standalone(tmp_path: Path) -> None:
    from flows.aggregate import aggregate
    from flows.efficiency import efficiency
    from flows.ingest import ingest
    from flows.judge import judge

    spec = write_spec(tmp_path, ["qwen3-4b"])
    assert ingest(spec=str(spec))[0]["new_traces"] == 4
    assert efficiency(spec=str(spec))["segmented"] == 4
    assert judge(spec=str(spec))["judge_calls"] == 0
    out = aggregate(spec=str(spec), out=str(tmp_path / "r2"))
    assert "teacher_dataset_metrics.csv" in out["files"]


def test_generating_teacher_is_not_ingested(tmp_path: Path) -> None:
    from legival_core.spec import Teacher
    from tasks.stages import GeneratingTeacher, ingest_teacher

    t = Teacher(name="g", generate={"backend": "vllm", "model": "Qwen/Qwen3-4B"})  # type: ignore[arg-type]
    with pytest.raises(GeneratingTeacher, match="legival generate --spec"):
        ingest_teacher(str(tmp_path / "s.duckdb"), t)
    from tasks._driver import close_stores

    close_stores()


def test_select_keeps_only_that_model(tmp_path: Path) -> None:
    from legival_core.spec import load_spec
    from tasks._driver import close_stores
    from tasks.stages import ingest_teacher_task

    spec = load_spec(write_spec(tmp_path, ["gpt-oss-20b"]))
    r = ingest_teacher_task.fn(str(tmp_path / "x.duckdb"), spec.teachers[0])
    close_stores()
    assert r.new_traces == 4 and r.files[0]["file"].endswith("traces.jsonl")
