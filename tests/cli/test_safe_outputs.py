"""Safe outputs through the real CLI (issue 26, part 5): a teacher name from the traces is data in
every file and line a command writes, never a formula, markup or a broken table; and `legival report
--out DIR` replaces DIR whole or leaves it exactly as it was (docs/reports.md, "Safe outputs")."""

from __future__ import annotations

import csv
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from legival_core.safe_csv import DANGEROUS, unescape
from tests._cli import Ran, legival
from tests.conftest import EXAMPLES, REPO
from tests.core.reports.render.test_safe_outputs import md_cells, md_text
from tests.core.reports.test_demo_snapshot import load_demo_store

HYPERLINK = '=HYPERLINK("http://x.invalid","click")'
MARKUP = "pipe|x [red]red[/red] :warning: \x1b[31mansi"
NAMES = (HYPERLINK, MARKUP, "\t@SUM(1+1)", "\r-2+3\nx", r"$\frac{$ +1")
"""The five teachers of the example traces renamed: a formula, rich markup with an emoji code,
a pipe and an ANSI escape, a tab and a carriage return at the start, a newline, a mathtext formula."""


def ok(r: Ran) -> Ran:
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ran]:
    tmp = tmp_path_factory.mktemp("hostile")
    lines = (EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text(encoding="utf-8").splitlines()
    models = sorted({json.loads(ln)["model"] for ln in lines})
    rename = dict(zip(models, NAMES, strict=False))
    traces = tmp / "hostile.jsonl"
    traces.write_text("".join(json.dumps({**r, "model": rename.get(r["model"], r["model"])}) + "\n"
                              for r in map(json.loads, lines)), encoding="utf-8")
    db = tmp / "s.duckdb"
    ok(legival("ingest", traces, "--db", db))
    ok(legival("transfer", "--db", db, "--backend", "scripted-demo", "--model", "scripted-demo-v1", "--limit", "4",
               "--max-new-tokens", "48"))
    out = tmp / "report"
    return out, ok(legival("report", "--db", db, "--out", out, "--resamples", "20"))


def test_no_report_csv_holds_a_formula(hostile_report: tuple[Path, Ran]) -> None:
    out, _ = hostile_report
    files = sorted(out.glob("*.csv"))
    assert len(files) == 27
    naming = []
    for path in files:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
        for row in rows:
            for cell in row:
                if cell.startswith(DANGEROUS):
                    float(cell)  # only a number may start like a formula (-0.5 in a numeric column)
        cells = {unescape(c) for row in rows for c in row}
        if HYPERLINK in cells:
            naming.append(path.name)
            assert "'" + HYPERLINK in {c for row in rows for c in row}
    # the formula teacher is in the rank tables, coverage and the figures' data, neutralised in each
    assert {"teacher_metrics.csv", "teacher_dataset_metrics.csv", "coverage.csv", "rank_pairs.csv",
            "rank_points.csv", "accuracy_frontier.csv", "gcot_dimensions.csv"} <= set(naming), naming
    assert len(naming) >= 11, naming


def test_the_ranking_artifact_table_is_intact(hostile_report: tuple[Path, Ran]) -> None:
    from tasks.prefect_ui import ranking_markdown

    out, _ = hostile_report
    table = [ln for ln in ranking_markdown("hostile", out, None).splitlines() if ln.startswith("|")]
    width = len(md_cells(table[0]))
    assert len(table) == 2 + 5 and all(len(md_cells(ln)) == width for ln in table[2:])
    shown = {md_text(md_cells(ln)[0]) for ln in table[2:]}
    # as typed, a line break or control character as a space (a cell's ends are stripped)
    assert shown == {HYPERLINK, "pipe|x [red]red[/red] :warning:  [31mansi", "@SUM(1+1)", "-2+3 x", r"$\frac{$ +1"}


def test_the_terminal_shows_each_name_as_typed(hostile_report: tuple[Path, Ran]) -> None:
    _, r = hostile_report
    lines = r.stdout.splitlines()
    assert "\x1b" not in r.stdout and "\u26a0" not in r.stdout  # no ANSI sequence, no emoji from `:warning:`
    assert any(ln.startswith(HYPERLINK + " ") for ln in lines)
    assert any(ln.startswith("pipe|x [red]red[/red] :warning: \\x1b[31mansi ") for ln in lines)
    assert any(ln.startswith("\\t@SUM(1+1) ") for ln in lines) and any(ln.startswith("\\r-2+3\\nx ") for ln in lines)
    table = lines[1:7]  # the header and one line per teacher, every column aligned
    assert len({ln.index("gsm8k") for ln in table[1:]}) == 1


def test_a_directory_that_is_not_a_report_is_refused_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own notes\n")
    r = legival("report", "--db", db, "--out", mine, "--resamples", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "notes.txt, which no report wrote" in r.stderr and r.stderr.startswith("error: --out ")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def _limit_file_size() -> None:  # in the child, before exec: a write past 50 kB fails (EFBIG), no signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_write_failing_part_way_leaves_the_previous_report_byte_identical(tmp_path: Path) -> None:
    db = tmp_path / "store" / "demo.duckdb"
    db.parent.mkdir()
    load_demo_store(db)
    out = tmp_path / "report"
    ok(legival("report", "--db", db, "--out", out, "--resamples", "20"))
    before = snapshot(out)
    assert len(before) > 30 and max(len(b) for b in before.values()) > 50_000  # some file is past the limit
    # The new report differs (no bootstrap); the real console script, its writes failing past 50 kB.
    p = subprocess.run([sys.executable, "-m", "legival", "report", "--db", str(db), "--out", str(out),
                        "--resamples", "0"], capture_output=True, text=True, cwd=REPO, env=dict(os.environ),
                       preexec_fn=_limit_file_size, timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"--out {out}: cannot write the report" in errors[0], p.stderr
    assert snapshot(out) == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["report", "store"]  # no temporary directory left
