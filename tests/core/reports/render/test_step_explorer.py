"""The step explorer's data (issue 41): a trace's markers per (student, depth) with their rollouts, its
stored step events with the drop on the marker that ends it, continuations capped in the static file
and whole under the live API; and the dashboard's step-effects section, through `legival report` as a
user runs it, before and after `legival step-events`.

The browser half (a click on a drop marker, the keyboard, escaping) is in test_dashboard_browser.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.reports.compute.step_effects import FEATURES, OUTCOMES
from legival_core.reports.render.dashboard import CONTINUATION_CHARS, trace_details
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.base import run_stage
from legival_core.stages.step_events import StepEventsStage
from legival_core.store import Store
from tests._cli import legival
from tests.conftest import REPO
from tests.core.reports.compute.test_step_effects import _planted_store

LONG = "The sum is 12 because 3 * 4 = 12. " * 200
"""A continuation of 6,800 characters: over the static file's cap."""
SENTENCES = ("First, 3 + 4 = 7.", "Wait, maybe it is 3 * 4 = 12.", "So the answer is 7.")


def _store(path: Path) -> None:
    """One trace of 3 steps and two students: `s-a` (named "alpha-student") is right at k = 1 and wrong
    at k = 2 (a drop over step 2) with two samples at k = 2, one forced; `s-b` overflows at k = 2."""
    text = " ".join(SENTENCES)
    spans, pos = [], 0
    for sentence in SENTENCES:
        start = text.index(sentence, pos)
        spans.append((start, start + len(sentence)))
        pos = start + len(sentence)

    def roll(student: str, k: int, sample: int, status: str = "ok", correct: bool | None = None,
             forced: bool = False, cont: str | None = None, forced_cont: str | None = None) -> dict[str, Any]:
        return {"trace_id": "t1", "student_key": student, "k": k, "sample": sample, "m": 3, "bin": 17 * k,
                "status": status, "correct": correct, "forced": forced, "extracted": None if correct is None else
                ("12" if correct else "7"), "grade_status": "ok", "continuation": cont or f"{student} k={k} s={sample}",
                "forced_continuation": forced_cont, "prompt_tokens": 50 + 10 * k}

    with Store(path) as s:
        s.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": "p1", "question": "3 times 4?", "gold": "12"}])
        s.insert_rows("traces", [{"trace_id": "t1", "teacher": "alpha", "dataset": "gsm8k", "problem_id": "p1",
                                  "reasoning": text, "answer_text": "7", "truncated": False}])
        s.insert_rows("steps", [{"trace_id": "t1", "segmenter": SEGMENTER_VERSION, "idx": i, "start_char": a,
                                 "end_char": b} for i, (a, b) in enumerate(spans, start=1)])
        s.insert_rows("students", [{"student_key": "s-a", "name": "alpha-student", "model": "m", "decoding": "greedy",
                                    "prompt_version": "1", "profile": "test"}])
        s.insert_rows("rollouts", [
            roll("s-a", 0, 0, correct=False), roll("s-a", 1, 0, correct=True),
            roll("s-a", 2, 0, correct=False, cont=LONG),
            roll("s-a", 2, 1, correct=False, forced=True, forced_cont="The answer is 7."),
            roll("s-b", 0, 0, correct=True), roll("s-b", 1, 0, correct=True),
            roll("s-b", 2, 0, status="overflow", cont=""),
        ])


@pytest.fixture(scope="module")
def details(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace's details as the static file embeds them and as `/api/trace` sends them."""
    path = tmp_path_factory.mktemp("explorer") / "s.duckdb"
    _store(path)
    with Store(path) as s:
        run_stage(StepEventsStage(), s)
    with Store(path, read_only=True) as s:
        capped = trace_details(s, ["t1"], 0.8, "all-MiniLM-L6-v2")["t1"]
        whole = trace_details(s, ["t1"], 0.8, "all-MiniLM-L6-v2", max_chars=None)["t1"]
    return capped, whole


def test_a_marker_per_student_and_depth_with_its_rollouts(details: tuple[dict[str, Any], dict[str, Any]]) -> None:
    d, _ = details
    got = [(m["student"], m["k"], m["kind"], m["forced"], m["n_samples"], m["n_ok"], m["n_correct"]) for m in d["markers"]]
    assert got == [("alpha-student", 0, "wrong", False, 1, 1, 0), ("s-b", 0, "correct", False, 1, 1, 1),
                   ("alpha-student", 1, "correct", False, 1, 1, 1), ("s-b", 1, "correct", False, 1, 1, 1),
                   ("alpha-student", 2, "wrong", True, 2, 2, 0), ("s-b", 2, "overflow", False, 1, 0, 0)]
    k2 = d["markers"][4]
    assert [(s["sample"], s["forced"], s["extracted"], s["forced_continuation"]) for s in k2["samples"]] == [
        (0, False, "7", None), (1, True, "7", "The answer is 7.")]
    assert d["markers"][2]["samples"][0]["continuation"] == "s-a k=1 s=0"
    # the drop (k 1 -> 2) sits on alpha-student's marker at k = 2, and on no other
    assert k2["drop"] == {"k_start": 1, "y_start": 1.0, "y_end": 0.0}
    assert [m["drop"] is not None for m in d["markers"]] == [False, False, False, False, True, False]
    assert "rollouts" not in d  # the samples are in the markers only (the static file's size)
    # a rise is carried like a drop: alpha-student's k = 1 (wrong at 0, right at 1)
    assert d["markers"][2]["rise"] == {"k_start": 0, "y_start": 0.0, "y_end": 1.0}
    assert [m["rise"] is not None for m in d["markers"]] == [False, False, True, False, False, False]


def test_the_step_cues_are_the_clis(details: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path) -> None:
    """The explorer flags [answer stated] and [self-check] on the steps the CLI's `--trace` flags: one
    function (`transfer.step_events.step_cues`) for both. Step 2 ends on 12, the gold; no step checks itself."""
    d, _ = details
    assert [(s["answer"], s["self_check"]) for s in d["steps"]] == [(False, False), (True, False), (False, False)]
    path = tmp_path / "s.duckdb"
    _store(path)
    r = legival("step-events", "--db", str(path), "--trace", "t1")
    assert r.returncode == 0, r.stderr[-2000:]
    cli = {s["idx"]: s["flags"] for s in json.loads(r.stdout.strip().splitlines()[-1])["steps"]}
    assert {s["idx"]: ["self-check"] * s["self_check"] + ["answer"] * s["answer"] for s in d["steps"]} == cli


def test_the_stored_step_events_of_the_trace(details: tuple[dict[str, Any], dict[str, Any]]) -> None:
    d, _ = details
    events = [(e["student"], e["k_start"], e["k_end"], e["outcome"]) for e in d["events"]]
    # s-b's k = 2 overflowed: it has depths 0 and 1 only, one flat segment
    assert events == [("alpha-student", 0, 1, "rise"), ("alpha-student", 1, 2, "drop"), ("s-b", 0, 1, "flat_correct")]
    drop = d["events"][1]
    assert drop["n_steps"] == 1 and drop["tokens_added"] == 10 and drop["backtracking"] is None
    assert d["events_command"] == "legival step-events --db DB"
    assert [s["text"] for s in d["steps"]] == list(SENTENCES)


def test_a_long_continuation_is_capped_in_the_static_file_and_whole_in_the_api(
        details: tuple[dict[str, Any], dict[str, Any]]) -> None:
    capped, whole = details
    static = capped["markers"][4]["samples"][0]["continuation"]
    assert static == LONG[:CONTINUATION_CHARS] + f"\u2026 (truncated, {len(LONG)} chars)"
    assert whole["markers"][4]["samples"][0]["continuation"] == LONG
    # short texts are never touched; everything but the continuations is the same
    assert capped["markers"][4]["samples"][1] == whole["markers"][4]["samples"][1]
    assert {k: v for k, v in capped.items() if k != "markers"} == {k: v for k, v in whole.items() if k != "markers"}


# --- the step-effects section, through `legival report` --------------------------------------------------


def _page_data(out: Path) -> dict[str, Any]:
    html = (out / "index.html").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(html.split('<script type="application/json" id="legival-data">', 1)[1]
                                      .split("</script>", 1)[0])
    return data


def test_the_step_effects_section_says_not_run_then_shows_numbers(tmp_path: Path) -> None:
    db = tmp_path / "planted.duckdb"
    _planted_store(db, problems=60)
    assert legival("grade", "--db", str(db), cwd=REPO).returncode == 0
    report = ("report", "--db", str(db), "--resamples", "50")

    r = legival(*report, "--out", str(tmp_path / "before"), cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    before = _page_data(tmp_path / "before")["step_effects"]
    assert before["ran"] is False and before["command"] == "legival step-events --db DB"
    assert before["scopes"] == ["plain", "planted", "all"]
    assert len(before["effects"]) == 3 * len(FEATURES) * len(OUTCOMES)
    assert {e["status"] for e in before["effects"]} == {"not run: legival step-events --db DB"}
    assert all(e["risk_difference"] is None for e in before["effects"])
    assert '<section id="steps">' in (tmp_path / "before" / "index.html").read_text(encoding="utf-8")

    with Store(db) as s:
        run_stage(StepEventsStage(), s)
    r = legival(*report, "--out", str(tmp_path / "after"), cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    after = _page_data(tmp_path / "after")["step_effects"]
    assert after["ran"] is True
    bt = next(e for e in after["effects"] if (e["scope"], e["feature"], e["outcome"]) == ("planted", "backtracking", "drop"))
    assert bt["status"] == "computed" and bt["n_events"] >= 30
    assert bt["rd_ci_low"] < bt["risk_difference"] < bt["rd_ci_high"] and bt["risk_difference"] > 0.2
    # a feature whose source was never computed says which command computes it
    red = next(e for e in after["effects"] if (e["scope"], e["feature"], e["outcome"]) == ("all", "redundant", "drop"))
    assert red["status"] == "not run: legival efficiency --db DB" and red["risk_difference"] is None
    assert {a["scope"] for a in after["agreement"]} == {"plain", "planted", "all"}
