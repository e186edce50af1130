"""`legival plan SPEC` / `legival run --dry-run` (issue 14, item 1), through the real entry point.

The demo store fixture (tests/fixtures/demo_store) holds the rollouts of a real `legival run
examples/demo.yaml`: the plan on a fresh store must predict exactly that many rollouts and their
prompt tokens (the backend's `prompt_tokens`) within 1%; on the stored demo it must find nothing to do.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.cli.test_report_honesty import legival, summary
from tests.conftest import EXAMPLES, REPO
from tests.core.reports.test_demo_snapshot import STORE_TABLES, load_demo_store

DEMO = REPO / "examples" / "demo.yaml"


def _demo_rollouts() -> tuple[int, int]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(STORE_TABLES / "rollouts.parquet")
    return t.num_rows, int(pc.sum(t["prompt_tokens"]).as_py())


def test_plan_on_a_fresh_store_predicts_the_demo_run(tmp_path: Path) -> None:
    db = tmp_path / "fresh.duckdb"
    r = legival("plan", str(DEMO), "--db", str(db))
    s = summary(r)
    rollouts, prompt_tokens = _demo_rollouts()
    assert s["command"] == "plan" and s["rollouts_missing"] == rollouts and s["rollouts_cached"] == 0
    assert abs(int(s["prompt_tokens"]) - prompt_tokens) <= 0.01 * prompt_tokens
    assert s["decode_budget"] == rollouts // 2 * (48 + 24)  # each student's max_new_tokens, 39 rollouts each
    plan = s["plan"]
    assert plan["traces_new"] == 80 and plan["traces_stored"] == 0
    assert plan["prompt_tokenizer"] == {"smollm2-135m": "tokenizer of SmolLM2-135M-Instruct-Q4_1-gguf",
                                        "gemma-3-270m": "tokenizer of gemma-3-270m-Q4_K_M-gguf"}
    assert plan["sentences_to_embed"] > 0 and plan["quality"] == {"clarity": 80, "cohesion": 80, "z3": 80}
    assert plan["times"][0]["accelerator"] == "cpu" and plan["times"][0]["seconds"] > 0
    # time (issue 28): per shard its expected engine seconds, per student an engine start plus its
    # shards' seconds on its one engine; the students take turns, so the run's time is their sum
    assert all(sh["seconds"] > 0 and sh["work"]["decode_steps"] > 0 for sh in plan["shards"])
    for t in plan["times"]:
        mine = [sh["seconds"] for sh in plan["shards"] if sh["student"] == t["student"]]
        assert t["basis"] == "measured" and t["low_s"] == t["seconds"] == t["high_s"]
        assert abs(t["compute_s"] - sum(mine)) < 0.5 and abs(t["seconds"] - t["load_s"] - t["compute_s"]) <= 1.1
        assert plan["decode_expected"][t["student"]].startswith("default: ")  # nothing stored yet
    assert s["estimated_wall_s"] == sum(t["seconds"] for t in plan["times"])
    assert not db.exists()  # a plan never creates the store
    assert "total" in r.stdout and f"rollouts: {rollouts} to generate of {rollouts} (0 cached)" in r.stdout

    dry = summary(legival("run", str(DEMO), "--db", str(db), "--dry-run"))
    assert dry["command"] == "run --dry-run" and dry["rollouts_missing"] == rollouts and not db.exists()


def test_plan_on_the_stored_demo_finds_nothing_to_do_and_leaves_the_store(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    s = summary(legival("plan", str(DEMO), "--db", str(db)))
    rollouts, _ = _demo_rollouts()
    assert s["rollouts_missing"] == 0 and s["rollouts_cached"] == rollouts and s["prompt_tokens"] == 0
    assert s["plan"]["traces_new"] == 0 and s["plan"]["traces_stored"] == 80
    assert s["expected_decode"] == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_plan_expected_decode_from_stored_rollouts(tmp_path: Path) -> None:
    """One teacher's rollouts deleted: they are planned with the mean decode of the stored ones."""
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    import duckdb

    con = duckdb.connect(str(db))
    deleted = dict(con.execute("SELECT student_key, count(*) FROM rollouts WHERE trace_id IN (SELECT trace_id "
                               "FROM traces WHERE teacher = 'gpt-oss-20b') GROUP BY 1").fetchall())
    con.execute("DELETE FROM rollouts WHERE trace_id IN (SELECT trace_id FROM traces WHERE teacher = 'gpt-oss-20b')")
    means = dict(con.execute("SELECT student_key, avg(completion_tokens) FROM rollouts WHERE status = 'ok' "
                             "GROUP BY 1").fetchall())
    con.close()
    s = summary(legival("plan", str(DEMO), "--db", str(db)))
    assert len(deleted) == 2 and s["rollouts_missing"] == sum(deleted.values()) > 0
    # per student: its own stored rollouts' mean decode times its missing rollouts
    assert s["expected_decode"] == sum(round(means[k] * n) for k, n in deleted.items())


def test_plan_errors_and_unknown_accelerator(tmp_path: Path) -> None:
    r = legival("plan", str(tmp_path / "nope.yaml"), ok=False)
    assert r.returncode == 2 and r.stderr.startswith("error:")
    spec = tmp_path / "gpu.yaml"
    text = DEMO.read_text().replace("gpus_per_engine: 0", "gpus_per_engine: 1\n  accelerator: tpu-v9")
    text = text.replace("data/", f"{EXAMPLES}/").replace("../demo-out", str(tmp_path))
    spec.write_text(text)
    s = summary(legival("plan", str(spec)))
    t = s["plan"]["times"][0]
    assert t["seconds"] is None and "no throughput row" in t["unavailable"] and "tpu-v9" in t["unavailable"]
    assert s["estimated_wall_s"] is None
    spec.write_text(text.replace("tpu-v9", "h100-80gb"))
    r = legival("plan", str(spec))
    s = summary(r)
    t = s["plan"]["times"][0]
    # a row resting on a published benchmark, not a measurement of this workload: the range its spread
    # implies (x/÷ 2), the citation as its source
    assert t["gpu_hours"] is not None and t["basis"] == "published" and "vLLM" in t["source"]
    assert t["low_s"] < t["seconds"] < t["high_s"] and t["high_s"] >= 3.9 * t["low_s"]
    assert s["estimated_wall_low_s"] < s["estimated_wall_s"] < s["estimated_wall_high_s"]
    assert "at the row's figures)" in r.stdout and "rates published: vLLM" in r.stdout
    spec.write_text(text.replace("tpu-v9", "l4"))
    t = summary(legival("plan", str(spec)))["plan"]["times"][0]
    assert t["basis"] == "assumption" and t["high_s"] >= 8.9 * t["low_s"]  # spread 3


@pytest.mark.parametrize("bad", ["traces: [data/missing.jsonl]"])
def test_plan_names_a_missing_trace_file(tmp_path: Path, bad: str) -> None:
    spec = tmp_path / "bad.yaml"
    text = DEMO.read_text().replace("traces: [data/gsm8k_md_eval_cot_5teachers.jsonl]\n    select: openai/gpt-oss-20b",
                                    bad + "\n    select: openai/gpt-oss-20b", 1)
    shutil.copytree(EXAMPLES, tmp_path / "data")
    spec.write_text(text.replace("../demo-out", str(tmp_path)))
    r = legival("plan", str(spec), ok=False)
    assert r.returncode == 2 and "missing.jsonl" in r.stderr


def test_a_bad_line_is_reported_in_the_spec_file_not_a_temporary_copy(tmp_path: Path) -> None:
    """`select:` ingests a filtered copy; its errors must still name the user's file and line."""
    bad = tmp_path / "bad.jsonl"
    lines = [x for x in (EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text(encoding="utf-8").splitlines()
             if '"openai/gpt-oss-20b"' in x][:3]
    bad.write_text("\n".join(lines) + '\n{"model": "openai/gpt-oss-20b", "dataset": "gsm8k", "problem_id": 5\n')
    spec = tmp_path / "s.yaml"
    text = DEMO.read_text().replace("data/", f"{EXAMPLES}/").replace("../demo-out", str(tmp_path))
    text = text.replace(f"traces: [{EXAMPLES}/gsm8k_md_eval_cot_5teachers.jsonl]\n    select: openai/gpt-oss-20b",
                        f"traces: [{bad}]\n    select: openai/gpt-oss-20b", 1)
    spec.write_text(text)
    r = legival("plan", str(spec), ok=False)
    assert r.returncode == 2 and f"error: {bad}:4: field '<json>'" in r.stderr, r.stderr


def test_a_select_that_matches_no_record_is_an_error_line(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    text = DEMO.read_text().replace("data/", f"{EXAMPLES}/").replace("../demo-out", str(tmp_path))
    spec.write_text(text.replace("select: openai/gpt-oss-20b", "select: openai/gpt-oss-2O0b", 1))
    r = legival("plan", str(spec), ok=False)
    assert r.returncode == 2 and "no record has model 'openai/gpt-oss-2O0b'" in r.stderr, r.stderr
