"""A run's judge job fails (with the cause) when every judge call failed, as `legival judge`
exits 2: a benchmark run must not look done with no judgement made."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_judge_task_raises_when_every_call_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from legival_core.run_config import BenchmarkSpec, Judge
    from legival_core.stages.ingest import ingest_file
    from legival_core.stages.judge import JudgeCallsFailed
    from legival_core.store import Store
    from tasks.stages import run_job, stage_jobs
    from tasks.store_lock import close_stores

    monkeypatch.setenv("GEMINI_API_KEY", "test-key-not-a-secret")
    db = tmp_path / "j.duckdb"
    with Store(db) as store:
        ingest_file(store, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
    cfg = Judge(name="gemini", base_url=f"http://127.0.0.1:{_closed_port()}", limit=1)
    spec = BenchmarkSpec.model_validate({"name": "j", "teachers": [{"name": "t", "traces": [str(EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")]}],
                                         "datasets": ["gsm8k"], "judge": cfg.model_dump()})
    try:
        with pytest.raises(JudgeCallsFailed, match="every call failed") as e:
            run_job(str(db), stage_jobs("judge", spec)[0], spec)
        assert "test-key-not-a-secret" not in str(e.value)
    finally:
        close_stores()
