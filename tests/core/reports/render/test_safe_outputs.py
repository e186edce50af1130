"""Safe outputs (issue 26, part 5): the one CSV writer (`reports/safe_csv.py`), the one markdown cell
escape (`reports/markdown.py`) and the report directory written whole (`reports/outdir.py`).

The CSV property: whatever text and numbers a frame holds, the file read back with the csv module has
no cell that a spreadsheet would run as a formula, except a number in a numeric column, and gives
back every value (one leading `'` removed from a neutralised text cell)."""

from __future__ import annotations

import csv
import math
import tempfile
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from legival_core import markdown
from legival_core.outputs import MANIFEST, foreign_entries, replaced_whole, write_manifest
from legival_core.safe_csv import DANGEROUS, escape, read_csv, unescape, write_csv

BUDGET = settings(max_examples=200, deadline=timedelta(seconds=2), derandomize=True, database=None,
                  print_blob=False, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

HOSTILE = '=HYPERLINK("http://x.invalid","click")'

_chars = st.one_of(st.sampled_from([*DANGEROUS, "'", '"', ",", "\n", "|", " ", "0", "1", ".", "e"]),
                   st.characters(codec="utf-8"))
_text = st.text(_chars, max_size=12)


@st.composite
def frames(draw: st.DrawFn) -> pl.DataFrame:
    """1-4 columns of text, categorical text, floats (negative, NaN, inf), integers or booleans, each
    with nulls; names are arbitrary text too."""
    n = draw(st.integers(0, 6))
    names = draw(st.lists(st.text(_chars, min_size=1, max_size=12), min_size=1, max_size=4, unique=True))
    columns = []
    for name in names:
        kind = draw(st.sampled_from(["text", "categorical", "float", "int", "bool"]))
        if kind in ("text", "categorical"):
            values = draw(st.lists(st.none() | _text, min_size=n, max_size=n))
            s = pl.Series(name, values, dtype=pl.Utf8)
            columns.append(s.cast(pl.Categorical) if kind == "categorical" else s)
        elif kind == "float":
            columns.append(pl.Series(name, draw(st.lists(st.none() | st.floats(), min_size=n, max_size=n)),
                                     dtype=pl.Float64))
        elif kind == "int":
            columns.append(pl.Series(name, draw(st.lists(st.none() | st.integers(-2**63, 2**63 - 1), min_size=n,
                                                         max_size=n)), dtype=pl.Int64))
        else:
            columns.append(pl.Series(name, draw(st.lists(st.none() | st.booleans(), min_size=n, max_size=n)),
                                     dtype=pl.Boolean))
    return pl.DataFrame(columns)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _read_back(frame: pl.DataFrame) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        write_csv(frame, path)
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
    # One column: a null is an empty line, which the csv module reads as no cell.
    return [r or [""] * frame.width for r in rows]


@BUDGET
@given(frames())
@example(pl.DataFrame({"teacher": [HOSTILE, "'=x", "-1.5", None, ""], "value": [-1.5, None, -0.0, math.inf, -math.inf],
                       "n": [-3, 0, None, 2, 1]}))
def test_no_csv_cell_is_a_formula_and_every_value_comes_back(frame: pl.DataFrame) -> None:
    rows = _read_back(frame)
    header, body = rows[0], rows[1:]
    assert [unescape(h) for h in header] == frame.columns
    assert len(body) == frame.height
    numeric = {i for i, t in enumerate(frame.dtypes) if t.is_numeric()}
    for row in body:
        assert len(row) == frame.width
        for i, cell in enumerate(row):
            if cell.startswith(DANGEROUS):
                assert i in numeric and _is_number(cell), (frame.columns[i], cell)
    for i, (name, dtype) in enumerate(frame.schema.items()):
        for row, value in zip(body, frame[name].to_list(), strict=True):
            cell = row[i]
            if value is None:
                assert cell == ""
            elif dtype == pl.Float64:
                assert (math.isnan(float(cell)) and math.isnan(value)) or float(cell) == value
            elif dtype == pl.Int64:
                assert int(cell) == value
            elif dtype == pl.Boolean:
                assert cell == ("true" if value else "false")
            else:
                assert unescape(cell) == value
                assert cell == value or (cell == "'" + value and value.lstrip("'").startswith(DANGEROUS))
    header_cells = [h for h in header if h.startswith(DANGEROUS)]
    assert not header_cells


def test_negative_numbers_stay_numbers_and_names_are_neutralised(tmp_path: Path) -> None:
    frame = pl.DataFrame({"teacher": [HOSTILE, "+1", "@SUM(A1)", "\tx", "\rx", "ok", None],
                          "delta": [-0.25, -1.0, 2.0, None, 0.5, -3.0, 1.0], "rank": [-1, 2, 3, 4, 5, 6, 7]})
    write_csv(frame, tmp_path / "t.csv")
    with (tmp_path / "t.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert [r[0] for r in rows[1:]] == ["'" + HOSTILE, "'+1", "'@SUM(A1)", "'\tx", "'\rx", "ok", ""]
    assert [r[1] for r in rows[1:]] == ["-0.25", "-1.0", "2.0", "", "0.5", "-3.0", "1.0"]
    assert rows[1][2] == "-1"
    assert read_csv(tmp_path / "t.csv").equals(frame)


def test_escape_is_one_to_one() -> None:
    for value in ("=1", "'=1", "''=1", "'", "''", "x", "", "-", "'x"):
        assert unescape(escape(value)) == value
    assert escape("'=1") == "''=1" and escape("'x") == "'x"


# --- markdown ------------------------------------------------------------------------------------------


def md_cells(line: str) -> list[str]:
    """The cells of a GFM table row: split at every `|` not escaped by a backslash."""
    assert line.startswith("| ") and line.endswith(" |"), line
    cells, cur, i = [], "", 1
    while i < len(line) - 1:
        ch = line[i]
        if ch == "\\":
            cur += line[i:i + 2]
            i += 2
            continue
        if ch == "|":
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur)
    return [c.strip() for c in cells]


def md_text(cell: str) -> str:
    """What a markdown renderer shows for a cell `markdown.cell` wrote."""
    import html
    import re

    return html.unescape(re.sub(r"\\(.)", r"\1", cell))


@BUDGET
@given(st.text(_chars | st.sampled_from(["\\", "[", "]", "*", "_", "`", "<", ">", "&", "\u2028"]), max_size=30))
def test_a_markdown_cell_stays_one_cell_and_shows_the_text(text: str) -> None:
    line = markdown.row(["a", markdown.cell(text), "b"])
    assert "\n" not in line and "\r" not in line
    cells = md_cells(line)
    assert len(cells) == 3 and cells[0] == "a" and cells[2] == "b"
    shown = md_text(cells[1])
    assert "<" not in cells[1] and "[" not in cells[1].replace("\\[", "")
    plain = "".join(" " if ord(c) < 32 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029" else c for c in text)
    assert shown.split() == plain.split()  # line breaks and control characters are spaces, the rest as typed


def test_the_diff_artifact_keeps_its_table_with_hostile_names() -> None:
    from legival_core.runs.diff import Changes, diff_markdown, diff_schema

    names = [HOSTILE, "pipe|x [red]red[/red]", "two\nlines | *bold* [l](http://x.invalid) <b>"]
    cols = diff_schema()
    rows = [{c: None for c in cols} | {"teacher": n, "dataset": "gsm8k", "metric": "fotu", "change": "value",
                                        "old": 0.1, "new": 0.2, "delta": 0.1} for n in names]
    md = diff_markdown(Changes(pl.DataFrame(rows, schema=cols), None, None, 2))
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    width = len(md_cells(table[0]))
    assert len(table) == 2 + len(names) and all(len(md_cells(ln)) == width for ln in table[2:])
    assert [md_text(md_cells(ln)[0]) for ln in table[2:]] == [n.replace("\n", " ") for n in names]
    assert "<b>" not in md and "[l](http" not in md and "*bold*" not in md


# --- the report directory --------------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def previous_report(out: Path) -> dict[str, bytes]:
    with replaced_whole(out) as new:
        (new / "teacher_metrics.csv").write_text("teacher\nold\n")
        (new / "stale.png").write_bytes(b"old png")
        write_manifest(new, ["teacher_metrics.csv", "stale.png"])
    return snapshot(out)


def test_a_failure_before_the_swap_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "report"
    before = previous_report(out)
    with pytest.raises(OSError, match="disk full"), replaced_whole(out) as new:
        (new / "teacher_metrics.csv").write_text("teacher\nnew\n")
        raise OSError(28, "disk full")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_report_replaces_the_previous_one_whole(tmp_path: Path) -> None:
    out = tmp_path / "report"
    previous_report(out)
    out.chmod(0o750)
    with replaced_whole(out) as new:
        (new / "teacher_metrics.csv").write_text("teacher\nnew\n")
        write_manifest(new, ["teacher_metrics.csv"])
    assert sorted(snapshot(out)) == [MANIFEST, "teacher_metrics.csv"]  # stale.png went with the old report
    assert (out / "teacher_metrics.csv").read_text() == "teacher\nnew\n" and (out.stat().st_mode & 0o777) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_directory_holding_other_files_is_refused_untouched(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "teacher_metrics.csv").write_text("teacher\n")
    with pytest.raises(FileExistsError, match=r"notes\.txt, teacher_metrics\.csv, which no report wrote"), replaced_whole(out):
        raise AssertionError("refused before the block runs")
    assert snapshot(out) == {"notes.txt": b"my notes", "teacher_metrics.csv": b"teacher\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    # A report written before manifests existed (its index.html, report files only) is a report.
    (out / "notes.txt").unlink()
    assert foreign_entries(out) == ["teacher_metrics.csv"]  # no dashboard: someone's CSV files
    (out / "index.html").write_text("<html></html>")
    assert foreign_entries(out) == []
    (out / "sub.csv").mkdir()
    assert foreign_entries(out) == ["sub.csv"]
    # With a manifest, a file the report did not list is not the report's.
    (out / "sub.csv").rmdir()
    write_manifest(out, ["teacher_metrics.csv", "index.html"])
    (out / "extra.csv").write_text("x")
    assert foreign_entries(out) == ["extra.csv"]
