"""Figures with any teacher or student name (issue 38, item 10): every PNG of the report draws names
as short, distinct, drawable labels, keeps its size, and matplotlib warns about nothing ("Tight layout
not applied", "Glyph ... missing"); the full names stay in the CSVs and the dashboard's data.

The label rule is checked as a property over arbitrary names (`short_labels`); the figures over whole
reports built from stores whose names are drawn by hypothesis, plus the hard cases named below; the
command once, as a user runs it.
"""

from __future__ import annotations

import struct
import tempfile
import unicodedata
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from legival_core.reports.render.early_plot import EARLY_PNG
from legival_core.reports.render.labels import WIDTH, _charmap, drawable, short_labels, width_of
from legival_core.reports.render.paper_plots import PAPER_PLOTS
from legival_core.reports.render.plots import PLOT_FILES
from legival_core.reports.stage import ReportConfig, build_reports
from legival_core.safe_csv import read_csv
from legival_core.store import Store
from tests._cli import legival
from tests.synthetic import early_answers_of, fill_synthetic

LONG = "Qwen/" + "x" * 280 + "-distilled-teacher-A"
"""A 300-character teacher name: before the fix it widened every figure and broke tight_layout."""

HARD = (
    LONG,
    LONG[:-1] + "B",  # differs from LONG only in its last character
    "org/" + "m" * 140 + "-A-" + "m" * 153,  # differs from the next only in the middle
    "org/" + "m" * 140 + "-B-" + "m" * 153,
    "模型" * 150,  # CJK the figure font cannot draw
    "型模" * 150,  # ... the same characters in another order: the same drawable text
    "😀🚀 emoji " * 30,
    "<script>alert('x')</script>" * 11,
    "$\\frac{1}{2}$ =HYPERLINK(\"x\")",  # no formula, no spreadsheet
    "line\nbreak\ttab\u202eright-to-left\u200bzero-width",
    "a",
    "b",
)
MANY = tuple(f"org/{'shared-prefix-' * 8}{i:02d}-{'tail' * 20}" for i in range(24))
STUDENTS = ("S" * 200 + "-student-1", "S" * 200 + "-student-2")
FIGURES = (*PLOT_FILES, *PAPER_PLOTS, EARLY_PNG)
MAX_SIDE_PX = 2400
"""Every figure of these stores measures under ~1800 px a side; a 300-character name drawn in full
made them 3000 to 4600 px wide."""

FAST = settings(max_examples=300, deadline=timedelta(seconds=2), derandomize=True, database=None,
                print_blob=False, suppress_health_check=[HealthCheck.too_slow])
REPORTS = settings(max_examples=2, deadline=None, derandomize=True, database=None, print_blob=False,
                   phases=(Phase.explicit, Phase.generate),  # a report takes seconds: no shrinking
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_any_char = st.characters(codec="utf-8", exclude_characters="|\x00")
_name = st.one_of(
    st.text(_any_char, min_size=1, max_size=300),
    st.text(st.sampled_from("ab模😀 \n-/"), min_size=1, max_size=8),
    st.builds(lambda head, mid, tail: head + mid + tail, st.just("org/" + "p" * 120), st.text(_any_char, max_size=3),
              st.just("s" * 120)),
)


def _clean_chars(label: str) -> bool:
    have = _charmap()
    return all(c == " " or (ord(c) in have and unicodedata.category(c)[0] not in "CZ") for c in label)


# --- the label rule, over any names -------------------------------------------------------------------

@FAST
@given(st.lists(_name, min_size=1, max_size=12))
@example(list(HARD))
@example(list(MANY))
@example(["abc", "abc\u200b", "abc\n", " abc"])  # the same drawable text four ways
def test_labels_are_bounded_drawable_and_distinct(names: list[str]) -> None:
    labels = short_labels(names)
    assert set(labels) == set(names)
    assert len(set(labels.values())) == len(labels), labels
    for name, label in labels.items():
        assert label and width_of(label) <= WIDTH, (name, label)
        assert _clean_chars(label), (name, label)
    assert short_labels(reversed(names)) == labels  # the set decides, not the order


@FAST
@given(st.lists(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=WIDTH),
                min_size=1, max_size=12, unique=True))
def test_names_that_fit_are_drawn_as_typed(names: list[str]) -> None:
    assert short_labels(names) == {n: n for n in names}


def test_labels_keep_what_tells_names_apart() -> None:
    labels = short_labels(HARD)
    assert labels[LONG].startswith("Qwen/x") and labels[LONG].endswith("teacher-A")
    assert labels[LONG[:-1] + "B"].endswith("teacher-B")
    assert "-A-" in labels[HARD[2]] and "-B-" in labels[HARD[3]]  # the place where they differ
    assert labels["a"] == "a" and labels["b"] == "b"
    assert "\n" not in labels[HARD[9]] and "\u202e" not in labels[HARD[9]]
    with pytest.raises(ValueError, match="width"):
        short_labels(["x"], width=4)


# --- every figure of a report -------------------------------------------------------------------------

@contextmanager
def _drawn_figures() -> Iterator[dict[str, Any]]:
    """Record, for each figure the report saves, its texts as drawn (by file name)."""
    from matplotlib.figure import Figure

    drawn: dict[str, Any] = {}
    save = Figure.savefig

    def recording(self: Figure, fname: Any, *args: Any, **kwargs: Any) -> None:
        save(self, fname, *args, **kwargs)
        drawn[Path(str(fname)).name] = _texts(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(Figure, "savefig", recording)
        yield drawn


def _texts(fig: Any) -> dict[str, list[list[str]]]:
    """The figure's texts, and the groups of texts that each name one thing per entry: the names by
    the points of an axes, a legend's entries, an axis' tick labels, a table's row labels."""
    from matplotlib.text import Annotation, Text

    every = [t.get_text() for t in fig.findobj(Text)]
    groups: list[list[str]] = []
    ticks: list[list[str]] = []
    for ax in fig.axes:
        groups.append([t.get_text() for t in ax.texts if isinstance(t, Annotation)])
        if ax.get_legend() is not None:
            groups.append([t.get_text() for t in ax.get_legend().get_texts()])
        for axis_ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
            ticks.append([t.get_text() for t in axis_ticks if t.get_text()])
        for table in ax.tables:
            cells = table.get_celld()
            every += [c.get_text().get_text() for c in cells.values()]
            groups.append([c.get_text().get_text() for (_, col), c in cells.items() if col == -1])
    return {"every": [every], "names": groups, "ticks": ticks}


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def _check_report(teachers: tuple[str, ...], students: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory(prefix="legival-labels-") as tmp:
        db, out = Path(tmp) / "s.duckdb", Path(tmp) / "out"
        with Store(db) as store:
            fill_synthetic(store, teachers=teachers, students=students, traces_per_cell=4, seed=3)
            early_answers_of(store, students[0])  # the early-answering figure draws a reader too
            with _drawn_figures() as drawn, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                build_reports(store, out, ReportConfig(resamples=0))
        assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
        assert set(drawn) == set(FIGURES)
        for name in FIGURES:
            assert max(_png_size(out / name)) <= MAX_SIDE_PX, (name, _png_size(out / name))
        long_names = [n for n in (*teachers, *students) if len(n) > WIDTH]
        for name, texts in drawn.items():
            blob = "\x00".join(texts["every"][0])
            for full in long_names:
                for text in {full, drawable(full)}:
                    chunks = {text[i:i + WIDTH + 1] for i in range(len(text) - WIDTH)}
                    assert not any(c in blob for c in chunks), (name, "draws a name in full", full[:60])
            for group in texts["names"]:
                assert len(set(group)) == len(group), (name, group)
                assert all(width_of(t) <= WIDTH for t in group), (name, group)
            for group in texts["ticks"]:
                assert len(set(group)) == len(group), (name, group)
        # the tables keep every full name
        assert set(read_csv(out / "teacher_metrics.csv", schema_overrides={"teacher": pl.Utf8})["teacher"].to_list()) == set(teachers)


@REPORTS
@given(teachers=st.lists(_name, min_size=1, max_size=6, unique=True),
       students=st.lists(_name, min_size=2, max_size=2, unique=True))
@example(teachers=list(HARD), students=list(STUDENTS))
@example(teachers=list(MANY), students=["s1", "s2"])
def test_every_figure_draws_short_distinct_names_without_a_warning(teachers: list[str], students: list[str]) -> None:
    _check_report(tuple(teachers), tuple(students))


# --- through the command ------------------------------------------------------------------------------

def test_report_command_with_a_300_character_teacher_prints_no_warning(tmp_path: Path) -> None:
    db, out = tmp_path / "s.duckdb", tmp_path / "out"
    with Store(db) as store:
        fill_synthetic(store, teachers=(LONG, "a", "b"), traces_per_cell=4, seed=1)
    # In-process, a warning the command emits lands in `caught` (the console script prints it on stderr).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ran = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Tight layout" not in ran.stderr and "Warning" not in ran.stderr, ran.stderr[-3000:]
    assert [str(w.message) for w in caught] == []
    assert all((out / name).stat().st_size > 0 for name in FIGURES)
    assert LONG in pl.read_csv(out / "teacher_metrics.csv")["teacher"].to_list()
    assert LONG in (out / "index.html").read_text(encoding="utf-8")  # the dashboard's data keeps it whole
