"""Reward models and monitorability as stages of the benchmark flow (spec sections `rewards:` and
`monitor:`): run when enabled, cached on a rerun, "unavailable" when the weights are absent."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from tests.flows._orchestration import prefect_harness, table_snapshot, write_spec  # noqa: F401


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised one-layer scalar RM with SmolLM2's tokenizer, saved locally."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    tok = AutoTokenizer.from_pretrained(smollm2_safetensors_dir())
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, num_labels=1,
                      max_position_embeddings=1024, pad_token_id=tok.eos_token_id)  # type: ignore[call-arg]
    out = tmp_path_factory.mktemp("rm")
    LlamaForSequenceClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _count(db: Path, sql: str) -> Any:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.usefixtures("prefect_harness")
def test_rewards_and_monitor_run_in_the_benchmark_flow_and_are_cached(tmp_path: Path, tiny_rm: Path) -> None:
    from flows.benchmark import benchmark

    spec = write_spec(
        tmp_path, ["gpt-oss-20b", "qwen3-4b"], transfer={"enabled": False},
        rewards={"enabled": True, "max_length": 512,
                 "models": ["skywork-v2-llama-8b", {"name": "tiny", "model": "local/tiny-rm", "path": str(tiny_rm)}]},
        monitor={"enabled": True, "supervisor": "scripted"},  # the spec's (scripted) student supervises
    )
    db = tmp_path / "store.duckdb"
    first = benchmark(spec=str(spec))
    assert list(first["stage_s"]) == ["ingest", "grade", "efficiency", "judge", "rewards", "monitor", "report",
                                      "shutdown"]  # the registered stages with a job (transfer is off)
    rm = {m["name"]: m for m in first["rewards"]["rm_models"]}
    assert rm["tiny"]["status"] == "ok" and rm["tiny"]["scored"] == 8  # 2 teachers x 4 problems
    assert rm["skywork-v2-llama-8b"]["status"] == "unavailable"  # its weights are not on this machine
    assert "Skywork/Skywork-Reward-V2-Llama-3.1-8B" in rm["skywork-v2-llama-8b"]["reason"]
    assert first["rewards"]["rm_unavailable"] == ["skywork-v2-llama-8b"]
    mon = first["monitor"]
    assert mon["status"] == "ok" and mon["supervisor"] == "scripted" and mon["cached"] == 0
    assert mon["asked"] == mon["items"] == mon["clean"] + mon["sabotage"] + mon["natural"] > 0
    assert _count(db, "SELECT count(*) FROM monitor_results WHERE supervisor = 'scripted'") == [(mon["asked"],)]
    assert dict(_count(db, "SELECT status, count(*) FROM trace_metrics WHERE metric LIKE 'rm:%' GROUP BY 1")) == {
        "ok": 8, "unavailable": 8}

    report = tmp_path / "report"
    coverage = [r for r in _rows(report / "coverage.csv") if r["metric"] == "rm_skywork-v2-llama-8b"]
    assert coverage and {r["status"] for r in coverage} == {"unavailable"}
    assert all("Skywork" in r["detail"] for r in coverage)
    teachers = _rows(report / "teacher_metrics.csv")
    assert all(r["rm_tiny"] != "" and r["rm_skywork-v2-llama-8b"] == "" for r in teachers)
    assert all(r["monitor_recall"] != "" for r in teachers)  # the verdicts reached the report

    before = table_snapshot(db)
    again = benchmark(spec=str(spec))
    assert again["monitor"]["asked"] == 0 and again["monitor"]["cached"] == mon["items"]
    rm2 = {m["name"]: m for m in again["rewards"]["rm_models"]}
    assert rm2["tiny"]["scored"] == 0 and rm2["skywork-v2-llama-8b"]["status"] == "unavailable"
    assert table_snapshot(db) == before  # nothing new computed or stored


def test_defaults_leave_both_stages_out_and_a_missing_supervisor_is_unavailable(tmp_path: Path) -> None:
    """Off by default (the demo's time is unchanged); an uninstalled supervisor model does not fail
    the run: the task reports it unavailable and stores nothing."""
    from legival_core.run_config import load_spec
    from tasks.prefect_ui import benchmark_stages
    from tasks.stages import run_job, stage_jobs
    from tasks.store_lock import close_stores
    from tests.conftest import REPO

    demo = load_spec(REPO / "examples" / "demo.yaml")
    assert not demo.rewards.enabled and not demo.monitor.enabled
    assert "rewards" not in benchmark_stages(demo) and "monitor" not in benchmark_stages(demo)

    spec = load_spec(write_spec(tmp_path, ["qwen3-4b"], monitor={
        "enabled": True, "supervisor": "absent", "model": "legival-tests/no-such-model"}))
    assert "monitor" in benchmark_stages(spec)
    db = str(tmp_path / "x.duckdb")
    try:
        run_job(db, stage_jobs("ingest", spec)[0], spec)
        s = run_job(db, stage_jobs("monitor", spec)[0], spec).as_dict()
    finally:
        close_stores()
    assert s["status"] == "unavailable" and "legival-tests/no-such-model" in s["reason"] and s["asked"] == 0
    assert _count(Path(db), "SELECT count(*) FROM monitor_results") == [(0,)]
