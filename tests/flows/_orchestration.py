"""Helpers shared by the orchestration tests: small real trace files and scripted specs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

DATA = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
MODELS = {
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "qwen3-4b": "Qwen/Qwen3-4B-Thinking-2507",
    "r1-qwen-7b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
}


def small_traces(dst: Path, problems: int = 4) -> Path:
    """The first `problems` problems of three teachers from the bundled real traces."""
    kept: dict[str, int] = {}
    lines = []
    for raw in DATA.read_text().splitlines():
        rec = json.loads(raw)
        if rec["model"] in MODELS.values() and kept.get(rec["model"], 0) < problems:
            kept[rec["model"]] = kept.get(rec["model"], 0) + 1
            lines.append(raw)
    dst.write_text("\n".join(lines) + "\n")
    return dst


def write_spec(folder: Path, teachers: list[str], delay_s: float = 0.0, limit: int = 3,
               engines: int = 1, traces: Path | None = None, backend_options: dict[str, Any] | None = None,
               **extra: Any) -> Path:
    if traces is None:
        traces = folder / "traces.jsonl"
        if not traces.exists():
            small_traces(traces)
    spec = {
        "store": "store.duckdb",
        "teachers": [{"name": t, "traces": [str(traces)], "select": MODELS[t]} for t in teachers],
        "datasets": ["gsm8k"],
        "students": [{"name": "scripted", "backend": "scripted-demo", "model": "scripted-demo-v1",
                      "backend_options": {"delay_s": delay_s, **(backend_options or {})}}],
        "transfer": {"limit": limit, "max_new_tokens": 24, "step_interval": 2},
        "report": {"out": "report"},
        "execution": {"local_cpus": 2, "max_concurrent_engines": engines, "traces_per_chunk": 1},
        **extra,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def table_snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, sorted, without timestamp columns (the only thing allowed to differ) and
    without the run records (every run adds one: tests/flows/test_run_records.py checks them) or the
    transfer's timings (what each run measured: tests/flows/test_flows.py checks them)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_name NOT IN "
                                    "('runs', 'run_metrics', 'transfer_timings') ORDER BY 1").fetchall():
            cols = [c for c, t in con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [table]).fetchall() if "TIMESTAMP" not in t.upper() and "DATE" not in t.upper()]
            if cols:
                sel = ", ".join(f'"{c}"' for c in cols)
                out[table] = sorted(con.execute(f'SELECT {sel} FROM "{table}"').fetchall(), key=repr)
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def prefect_harness(prefect_api: str):  # type: ignore[no-untyped-def]
    """A real Prefect API for the module's flows: the session's test server (tests/conftest.py), with
    the flow runs and artifacts of earlier modules deleted first, so a module sees only its own (as
    with a server of its own, without paying a server start per module)."""
    from tests.conftest import forget_prefect_runs

    forget_prefect_runs()
    yield


@pytest.fixture
def ray_down():  # type: ignore[no-untyped-def]
    """Leave no Ray behind: engines and a Ray the flows started (on the Ray owner thread), then any
    Ray the test started itself."""
    yield
    import ray

    from tasks.ray_pool import shutdown_pools

    shutdown_pools()
    ray.shutdown()
