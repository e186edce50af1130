"""Same inputs, same numbers as the benchmark path (issue 47): completions scored by the reward's core
(`legival_core.rl.score.Scorer`) and the same texts ingested as traces and run through `legival
transfer`, `legival efficiency` and `legival report` with the same student and depths give the same
transfer (FOTU), length, steps, redundancy and backtracking, and the same correctness. Once with the
scripted student (every pipeline step, fast) and once with the real embedded SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from legival_core.rl.items import Item
from legival_core.rl.score import Scorer
from legival_core.run_config.reward import parse_reward_spec
from tests._cli import legival

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")
COMPLETIONS = [
    ("In April Natalia sold 48 clips. In May she sold half as many, so 48 / 2 = 24 clips. Wait, let me check: "
     "half of 48 is 24. Altogether she sold 48 + 24 = 72 clips. So the total is 72. The answer is \\boxed{72}."),
    ("<think>April: 48 clips. May: half of April, 24 clips. Hmm, 48 plus 24 is 72. Total 72.</think> The answer is 72."),
    "She sold 48 and then 30, so 78 in all. The answer is \\boxed{78}.",
]
STUDENTS = {
    "scripted": {"name": "scripted-demo", "backend": "scripted-demo", "model": "scripted-demo-v1"},
    "smollm2": {"name": "smollm2-135m", "backend": "embedded", "model": "smollm2-135m"},
}


@pytest.mark.parametrize("student", ["scripted", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_the_reward_and_the_benchmark_agree(student: str, tmp_path: Path) -> None:
    s = STUDENTS[student]
    spec = parse_reward_spec({"dataset": "gsm8k", "components": {
        "correct": {"weight": 1}, "length": {"weight": 0.1, "target": 20}, "redundancy": {"weight": 0.1},
        "backtracking": {"weight": 0.1}, "format": {"weight": 0.1},
        "transfer": {"weight": 0.5, "student": s, "step_interval": 2, "max_new_tokens": 48}}})
    scorer = Scorer(spec)
    try:
        scored = scorer.score([Item(QUESTION, c, "72") for c in COMPLETIONS])
    finally:
        scorer.close()
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps({"model": "policy", "dataset": "gsm8k", "problem_id": f"p{i}", "problem": QUESTION,
                                          "gold_answer": "72", "response": c}) + "\n" for i, c in enumerate(COMPLETIONS)))
    db = tmp_path / "s.duckdb"
    for args in (["ingest", traces, "--db", db],
                 ["transfer", "--db", db, "--student", s["name"], "--backend", s["backend"], "--model", s["model"],
                  "--max-new-tokens", "48", "--step-interval", "2"],
                 ["efficiency", "--db", db],
                 ["report", "--db", db, "--out", tmp_path / "r", "--resamples", "0"]):
        ran = legival(*args)
        assert ran.returncode == 0, (args, ran.stderr[-3000:])
    bench = {r["problem_id"]: r for r in pl.read_parquet(tmp_path / "r" / "traces.parquet").to_dicts()}
    for i, got in enumerate(scored):
        b = bench[f"p{i}"]
        assert got.correct == b["correct"], i
        c = got.components
        assert c["length"].raw == b["token_len"] and c["redundancy"].raw == pytest.approx(b["redundancy"])
        assert c["backtracking"].raw == pytest.approx(b["backtracking"]), i
        if b["correct"]:
            assert c["transfer"].raw == pytest.approx(b["fotu"]), i  # the same rollouts, the same FOTU
        else:
            assert c["transfer"].value == 0.0 and b["fotu"] is None  # SPEC §4: correct traces only
    assert [g.correct for g in scored] == [True, True, False]
