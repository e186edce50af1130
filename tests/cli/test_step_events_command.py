"""`legival step-events` as a user runs it (issue 41, item 5): it computes the step events and a rerun computes
nothing; `--trace` shows a trace step by step (flags, a marker per student at each depth, drops on
their segment, the trace's own text never read as markup); `--teacher --top` ranks segments by their
drops across students; bad ids are one `error:` line, exit 2.

The store is built here through the store API with a known answer: teacher `t`, three students, four
traces of six steps with rollouts at depths 0, 3 and 6, where segment (0, 3] of trace `A` drops for all
three students, (3, 6] of `B` for two, (3, 6] of `C` for one, and `D` never drops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from legival_core.datasets.base import grader_key
from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.transfer.utility import bins_of
from legival_core.types import canonical_json
from tests._cli import Ran, legival

MARKUP = "Wait, [bold]recheck[/bold] the [red]sum[/red] :warning: here."
STUDENTS = ("s1", "s2", "s3")
DEPTHS = (0, 3, 6)
CORRECT = {  # trace -> student -> correctness at depths 0, 3, 6
    "A": {"s1": (1, 0, 1), "s2": (1, 0, 0), "s3": (1, 0, 1)},
    "B": {"s1": (0, 1, 0), "s2": (0, 1, 0), "s3": (0, 1, 1)},
    "C": {"s1": (1, 1, 0), "s2": (1, 1, 1), "s3": (1, 1, 1)},
    "D": {"s1": (0, 1, 1), "s2": (1, 1, 1), "s3": (0, 0, 1)},
}


def build_store(path: Path, efficiency: bool = True) -> None:
    """The store of the module docstring; `efficiency=False`: no lexical backtracking row and no r_i
    (the efficiency stage never ran)."""
    import numpy as np
    import pyarrow as pa

    traces, steps, metrics, sims, roll = [], [], [], [], []
    for n, tid in enumerate(CORRECT):
        sentences = [f"Step {j} adds {j} apples." for j in range(1, 7)]
        if tid == "A":
            sentences[1] = MARKUP
        text, spans = "", []
        for sentence in sentences:
            text += " " if text else ""
            spans.append((len(text), len(text) + len(sentence)))
            text += sentence
        traces.append({"trace_id": tid, "teacher": "t", "dataset": "gsm8k", "problem_id": f"p{n}", "reasoning": text,
                       "answer_text": "\\boxed{7}", "truncated": False})
        steps += [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": j, "start_char": a, "end_char": b}
                  for j, (a, b) in enumerate(spans, start=1)]
        metrics.append({"trace_id": tid, "metric": BACKTRACKING.name, "params": canonical_json({}),
                        "code_version": BACKTRACKING.version, "value": 1 / 6, "method": "lexical", "status": "ok",
                        "detail": canonical_json({"steps": [2] if tid == "A" else []})})
        sims += [{"trace_id": tid, "model": "all-MiniLM-L6-v2", "segmenter": SEGMENTER_VERSION, "idx": j,
                  "max_prev_cos": 0.9 if j == 2 else 0.3} for j in range(2, 7)]
        for student, ys in CORRECT[tid].items():
            roll += [{"trace_id": tid, "student_key": f"key-{student}", "k": k, "sample": 0, "m": 6,
                      "bin": int(bins_of(np.array([k]), np.array([6]), 50)[0]), "status": "ok", "correct": bool(y),
                      "forced": k == 0, "prompt_tokens": 100 + 10 * k} for k, y in zip(DEPTHS, ys, strict=True)]
    roll.append({**roll[-1], "sample": 1, "status": "overflow", "correct": None, "forced": False})
    with Store(path) as s, s.transaction():
        s.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": f"p{n}", "question": "q", "gold": "7"}
                                   for n in range(len(CORRECT))])
        s.insert_arrow("traces", pa.Table.from_pylist(traces))
        s.insert_arrow("steps", pa.Table.from_pylist(steps))
        s.insert_rows("step_counts", [{"trace_id": t["trace_id"], "segmenter": SEGMENTER_VERSION, "m": 6}
                                      for t in traces])
        s.insert_rows("grades", [{"trace_id": t["trace_id"], "grader": grader_key("gsm8k"), "extracted": "7",
                                  "correct": True, "status": "ok"} for t in traces])
        if efficiency:
            s.insert_arrow("trace_metrics", pa.Table.from_pylist(metrics))
            s.insert_arrow("step_similarity", pa.Table.from_pylist(sims))
        s.insert_rows("students", [{"student_key": f"key-{x}", "name": x, "model": x, "decoding": "greedy",
                                    "prompt_version": "1", "profile": "synthetic"} for x in STUDENTS])
        s.insert_arrow("rollouts", pa.Table.from_pylist(roll))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("steps-cmd") / "steps.duckdb"
    build_store(path)
    return path


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "steps.duckdb"
    shutil.copyfile(template, path)
    return path


def run(*args: str, code: int = 0) -> Ran:
    r = legival(*args)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == code, (args, r.returncode, r.stderr[-3000:])
    return r


def summary(r: Ran) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def test_steps_computes_the_events_and_a_rerun_computes_nothing(db: Path) -> None:
    first = summary(run("step-events", "--db", str(db)))
    assert first["command"] == "step-events"
    assert (first["traces"], first["pairs"], first["events"]) == (4, 12, 24)  # 4 traces x 3 students x 2 segments
    again = summary(run("step-events", "--db", str(db)))
    assert (again["traces"], again["pairs"], again["events"]) == (0, 0, 0) and again["stored_pairs"] == 12
    old = run("steps", "--db", str(db))  # the verb's old name still works, and says the new one
    assert summary(old)["command"] == "step-events" and summary(old)["stored_pairs"] == 12
    assert "note: `legival steps` is now `legival step-events`" in old.stderr


def test_the_trace_view_shows_steps_flags_markers_and_drops_with_the_text_as_typed(db: Path) -> None:
    before = run("step-events", "--db", str(db), "--trace", "A")
    assert f"not run: legival step-events --db {db}" in before.stdout
    assert "k=3:" in before.stdout and "s1 W" in before.stdout  # markers without events
    run("step-events", "--db", str(db))
    r = run("step-events", "--db", str(db), "--trace", "A")
    lines = r.stdout.splitlines()
    step2 = next(ln for ln in lines if ln.lstrip().startswith("2 "))
    assert MARKUP in step2  # printed as typed: no markup read, no emoji code replaced
    assert "[backtracking]" in step2 and "[redundant]" in step2 and "DROP (s1, s2, s3)" in step2
    assert "[redundant]" not in next(ln for ln in lines if ln.lstrip().startswith("4 "))
    assert "DROP" not in next(ln for ln in lines if ln.lstrip().startswith("5 "))  # (3, 6] rose or stayed
    k0 = next(ln for ln in lines if "k=0:" in ln)
    assert "s1 c" in k0 and "s2 c" in k0  # forced and correct at depth 0
    k3 = next(ln for ln in lines if "k=3:" in ln)
    assert all(f"{s} W \u2193drop" in k3 for s in STUDENTS)
    out = summary(r)
    assert out["events_status"] == "computed" and out["drops"] == 3 and out["m"] == 6
    assert [s["idx"] for s in out["steps"]] == list(range(1, 7))
    assert out["steps"][1]["flags"] == ["backtracking", "redundant"]
    overflow = run("step-events", "--db", str(db), "--trace", "D")
    assert "O" in next(ln for ln in overflow.stdout.splitlines() if "k=6:" in ln).split("s3 ")[1]


def test_top_ranks_a_teachers_segments_by_drops_across_students(db: Path) -> None:
    run("step-events", "--db", str(db))
    r = run("step-events", "--db", str(db), "--teacher", "t", "--top", "2")
    got = [(s["trace_id"], s["k_start"], s["k_end"], s["n_drops"], s["n_students"]) for s in summary(r)["segments"]]
    assert got == [("A", 0, 3, 3, 3), ("B", 3, 6, 2, 3)]
    assert "Step 1 adds 1 apples. " + MARKUP + " Step 3 adds 3 apples." in r.stdout
    every = summary(run("step-events", "--db", str(db), "--teacher", "t", "--dataset", "gsm8k"))["segments"]
    assert [(s["trace_id"], s["n_drops"]) for s in every] == [("A", 3), ("B", 2), ("C", 1)]  # D never drops
    wrong = run("step-events", "--db", str(db), "--teacher", "t", "--dataset", "math", code=2)  # not t's dataset
    assert "teacher 't' has no trace of dataset 'math' (its datasets: gsm8k)" in wrong.stderr


def test_the_top_list_before_the_steps_ran_says_so(db: Path) -> None:
    r = run("step-events", "--db", str(db), "--teacher", "t")
    assert f"not run: legival step-events --db {db}" in r.stdout and summary(r)["segments"] == []


@pytest.mark.parametrize(("args", "said"), [
    (("--trace", "Ax"), "no trace 'Ax' in the store"),
    (("--trace", "[bold]nope"), "no trace '[bold]nope' in the store"),
    (("--teacher", "u"), "no teacher 'u' in the store (teachers: t)"),
    (("--trace", "A", "--teacher", "t"), "give one of them"),
    (("--dataset", "gsm8k"), "give --teacher too"),
    (("--top", "3"), "--top sizes the list of --teacher: give --teacher too"),
    (("--trace", "A", "--top", "3"), "give --teacher too"),
])
def test_bad_ids_are_one_error_line(db: Path, args: tuple[str, ...], said: str) -> None:
    r = run("step-events", "--db", str(db), *args, code=2)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and said in errors[0], r.stderr
    if args == ("--trace", "Ax"):
        assert "did you mean A?" in errors[0]


def test_no_rollouts_is_said_on_stderr_and_the_json_still_ends_the_output(tmp_path: Path) -> None:
    path = tmp_path / "bare.duckdb"
    with Store(path) as s, s.transaction():
        s.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": "p0", "question": "q", "gold": "7"}])
    r = run("step-events", "--db", str(path))
    assert f"no rollouts: run legival transfer --db {path} first" in r.stderr
    assert summary(r)["pairs"] == 0


def test_a_trace_transfer_never_rolls_out_says_why(db: Path) -> None:
    with Store(db) as s, s.transaction():
        s._run("DELETE FROM rollouts WHERE trace_id = 'D'")
        s._run("UPDATE grades SET correct = false WHERE trace_id = 'D'")
        s._run("DELETE FROM rollouts WHERE trace_id = 'C'")
    wrong = summary(run("step-events", "--db", str(db), "--trace", "D"))
    assert wrong["events_status"] == "not a transfer trace: graded wrong: transfer rolls out correct traces only"
    assert wrong["drops"] is None and wrong["events"] == 0  # the stage never ran for it: not "0 drops"
    right = summary(run("step-events", "--db", str(db), "--trace", "C"))  # correct, its rollouts gone: not run
    assert right["events_status"].startswith(f"not run: legival transfer --db {db}") and right["drops"] is None
    run("step-events", "--db", str(db))
    assert summary(run("step-events", "--db", str(db), "--trace", "A"))["drops"] == 3


def test_the_no_r_i_hint_names_the_model_given(db: Path) -> None:
    r = run("step-events", "--db", str(db), "--trace", "A", "--model", "other-model")
    assert f"no r_i: legival efficiency --db {db} --model other-model" in r.stdout
    plain = run("step-events", "--db", str(db), "--trace", "A")
    assert "r_i stored" in plain.stdout
