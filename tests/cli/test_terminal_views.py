"""Untrusted text on a terminal is shown, never obeyed (issue 45, class 8; legival_core/visible.py).

A store whose teacher names, problem ids and trace text carry a right-to-left override, ANSI escape and
OSC sequences, a carriage return, bidi isolates, zero-width and tag characters goes through every CLI view
that prints stored text (the report table, `steps --trace`, `steps --teacher --top`, `runs`, `diff`,
`study list`) and the errors that quote an input (a bad trace line, an unknown trace id or teacher): not
one such character reaches either stream raw, each is there as its escape, and the closing JSON line
keeps JSON's own escaping (ASCII only).
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import pytest

from legival_core.visible import UNSAFE_CATEGORIES, visible
from tests._cli import Ran, legival
from tests._sql import rows
from tests.conftest import EXAMPLES

RLO = "\u202e"
HOSTILE_NAME = f"ev{RLO}il\x1b[2J\x1b]0;pwned\x07\u2066x\u200b\U000e0041\r"
HOSTILE_TEXT = f"Wait{RLO}, the \x1b[31mred\x1b[0m step\u2067 back\u2028over\x08. "
PROBLEM_SUFFIX = f"-{RLO}p\x1b[1m"


def raw_unsafe(text: str) -> list[str]:
    """The unsafe characters of `text` left raw (a newline and a tab between lines are fine)."""
    return sorted({repr(c) for c in text if c not in "\n\t" and unicodedata.category(c) in UNSAFE_CATEGORIES})


def shown_safely(r: Ran, *must_show: str) -> None:
    assert raw_unsafe(r.stdout) == [] and raw_unsafe(r.stderr) == [], (r.args, raw_unsafe(r.stdout + r.stderr))
    out = r.stdout + r.stderr
    for s in must_show:
        assert visible(s) in out or visible(s, newlines=True) in out, (s, out[-3000:])
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if last.startswith("{"):
        assert last.isascii()  # JSON's own escaping
        json.loads(last)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(store, the hostile teacher's name, one of its transfer traces' ids)."""
    tmp = tmp_path_factory.mktemp("views")
    records = [json.loads(ln) for ln in (EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text().splitlines()]
    first = sorted({r["model"] for r in records})[0]
    hostile_records = []
    for r in records:
        if r["model"] == first:
            r = {**r, "model": HOSTILE_NAME, "problem_id": str(r["problem_id"]) + PROBLEM_SUFFIX,
                 "reasoning": HOSTILE_TEXT + r["reasoning"] if r.get("reasoning") else r.get("reasoning")}
        hostile_records.append(r)
    traces = tmp / "t.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in hostile_records), encoding="utf-8")
    db = tmp / "s.duckdb"
    assert legival("ingest", traces, "--db", db).returncode == 0
    r = legival("transfer", "--db", db, "--backend", "scripted-demo", "--model", "scripted-demo-v1", "--limit", "3",
                "--max-new-tokens", "48", "--teacher", HOSTILE_NAME)
    assert r.returncode == 0, r.stderr
    assert legival("step-events", "--db", db).returncode == 0
    from legival_core.reports.compute.build import compute_report
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.runs.record import RunInfo, record_run
    from legival_core.store import Store

    with Store(db) as store:
        record_run(store, compute_report(store, ReportConfig(resamples=0)),
                   RunInfo(f"spec{RLO}x\x1b[5m", "h1", datetime.now(UTC)))
        (trace_id,), = rows(store, "SELECT DISTINCT r.trace_id FROM rollouts r JOIN traces t USING (trace_id) "
                                   "WHERE t.teacher = ? ORDER BY 1 LIMIT 1", [HOSTILE_NAME])
    extra = tmp / "more.jsonl"
    extra.write_text(json.dumps({**hostile_records[0], "model": f"second{RLO}\x1b[7m"}) + "\n", encoding="utf-8")
    assert legival("ingest", extra, "--db", db).returncode == 0
    with Store(db) as store:
        record_run(store, compute_report(store, ReportConfig(resamples=0)),
                   RunInfo(f"spec{RLO}x\x1b[5m", "h1", datetime.now(UTC)))
    return db, HOSTILE_NAME, trace_id


def test_the_report_table_shows_the_names_escaped(hostile: tuple[Path, str, str], tmp_path: Path) -> None:
    db, name, _ = hostile
    r = legival("report", "--db", db, "--out", tmp_path / "rep", "--resamples", "0")
    assert r.returncode == 0, r.stderr
    shown_safely(r, name)


def test_steps_trace_view_shows_the_text_escaped(hostile: tuple[Path, str, str]) -> None:
    db, name, trace_id = hostile
    r = legival("step-events", "--db", db, "--trace", trace_id)
    assert r.returncode == 0, r.stderr
    shown_safely(r, name, RLO + ", the \x1b[31mred")


def test_steps_top_view_shows_names_and_ids_escaped(hostile: tuple[Path, str, str]) -> None:
    db, name, _ = hostile
    r = legival("step-events", "--db", db, "--teacher", name, "--top", "3")
    assert r.returncode == 0, r.stderr
    shown_safely(r, name)


def test_runs_and_diff_show_spec_and_teacher_names_escaped(hostile: tuple[Path, str, str]) -> None:
    db, _, _ = hostile
    r = legival("runs", "--db", db)
    assert r.returncode == 0, r.stderr
    shown_safely(r, f"spec{RLO}x\x1b[5m")
    r = legival("diff", "--db", db)
    assert r.returncode in (0, 1), r.stderr
    shown_safely(r, f"second{RLO}\x1b[7m")


def test_errors_that_quote_an_input_show_it_escaped(hostile: tuple[Path, str, str], tmp_path: Path) -> None:
    db, name, _ = hostile
    shown_safely(legival("step-events", "--db", db, "--trace", f"nope{RLO}\x1b[2J"))
    shown_safely(legival("step-events", "--db", db, "--teacher", f"who{RLO}\x1b[2J"))
    bad = tmp_path / f"bad{RLO}.jsonl"
    bad.write_text(json.dumps({"model": name, "dataset": f"gsm{RLO}8k\x1b[2J", "problem_id": "x", "problem": "q",
                               "gold_answer": "1", "response": "1"}) + "\n", encoding="utf-8")
    r = legival("ingest", bad, "--db", tmp_path / "new.duckdb")
    r.error()
    shown_safely(r, f"gsm{RLO}8k\x1b[2J")


def test_study_list_shows_a_hostile_study_name_escaped(tmp_path: Path) -> None:
    from tests.core.study.server_store import make_served_study

    db = tmp_path / "s.duckdb"
    make_served_study(db, participants=2, per_participant=2, n_problems=8, teachers=(f"t{RLO}\x1b[2Ja", "b"))
    r = legival("study", "list", "--db", db)
    assert r.returncode == 0, r.stderr
    shown_safely(r)
