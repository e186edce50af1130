"""`legival agreement TABLE --a COL --b COL` (issue 48 part 7) as a user runs it: the statistics by hand
(tests/core/test_agreement.py derives them), the JSON line's keys, --ordinal, --categories, --out, Parquet,
and every bad row as one `error: FILE:LINE: field 'COL': ...` line with exit 2."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pytest

from legival_core.safe_csv import read_csv
from tests._cli import Ran, legival

KEYS = {"n", "raw_agreement", "kappa", "max_prevalence_a", "max_prevalence_b", "saturated"}


def _table(path: Path, a: list[object], b: list[object], names: tuple[str, str] = ("judge", "human")) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["item", *names])
        w.writerows([i, x, y] for i, (x, y) in enumerate(zip(a, b, strict=True)))
    return path


def _paradox(tmp_path: Path) -> Path:
    """200 items: 193 both "no", 3 "no"/"yes", 3 "yes"/"no", 1 both "yes" (tests/core/test_agreement.py)."""
    a = ["no"] * 196 + ["yes"] * 4
    b = ["no"] * 193 + ["yes"] * 3 + ["no"] * 3 + ["yes"]
    return _table(tmp_path / "flags.csv", a, b)


def _ok(ran: Ran) -> dict[str, object]:
    assert ran.returncode == 0, ran.stderr
    return ran.summary()


def test_saturated_flags_kappa_low_ac1_near_raw_agreement(tmp_path: Path) -> None:
    ran = legival("agreement", _paradox(tmp_path), "--a", "judge", "--b", "human", "--resamples", "200")
    s = _ok(ran)
    assert KEYS | {"ac1"} <= set(s) and "ac2" not in s
    assert (s["command"], s["n"], s["raw_agreement"], s["saturated"]) == ("agreement", 200, 0.97, True)
    assert s["kappa"] == pytest.approx(23 / 98) and s["ac1"] == pytest.approx(2327 / 2402)
    assert (s["max_prevalence_a"], s["max_prevalence_b"]) == (0.98, 0.98)
    assert s["categories"] == ["no", "yes"] and s["prevalence_b"] == [0.98, 0.02] and s["weights"] == "identity"
    lo, hi = s["ac1_ci"]
    assert lo <= s["ac1"] <= hi and s["resamples"] == 200
    assert "Gwet's AC1" in ran.stdout and "saturated: 98%" in ran.stdout


def test_ordinal_gives_quadratic_kappa_and_ac2(tmp_path: Path) -> None:
    path = _table(tmp_path / "grades.csv", [0, 0, 0, 1, 2, 2], [0, 0, 1, 1, 2, 1])
    s = _ok(legival("agreement", path, "--a", "judge", "--b", "human", "--ordinal", "--resamples", "0"))
    assert KEYS | {"ac2"} <= set(s) and "ac1" not in s
    assert s["kappa"] == pytest.approx(17 / 23) and s["ac2"] == pytest.approx(19 / 25)
    assert s["raw_agreement"] == pytest.approx(2 / 3) and s["raw_agreement_weighted"] == pytest.approx(11 / 12)
    assert s["categories"] == [0, 1, 2] and s["weights"] == "quadratic" and s["ac2_ci"] == [None, None]


def test_categories_fix_the_scale(tmp_path: Path) -> None:
    """--categories 4: category 3 unused by both still counts in AC1's q (kappa does not change)."""
    path = _table(tmp_path / "grades.csv", [0, 0, 0, 1, 2, 2], [0, 0, 1, 1, 2, 1])
    s = _ok(legival("agreement", path, "--a", "judge", "--b", "human", "--categories", "4"))
    assert s["categories"] == [0, 1, 2, 3] and s["prevalence_a"][3] == 0.0
    assert s["kappa"] == pytest.approx(13 / 25) and s["ac1"] == pytest.approx(97 / 169)


def test_out_writes_one_row_per_statistic(tmp_path: Path) -> None:
    path = _table(tmp_path / "t.csv", ["=1+1", "=1+1", "b", "b"], ["=1+1", "b", "b", "b"])
    out = tmp_path / "sub" / "agreement.csv"
    s = _ok(legival("agreement", path, "--a", "judge", "--b", "human", "--out", out))
    assert s["out"] == str(out)
    assert "'=1+1" in out.read_text()  # a label that reads as a formula is neutralised (safe_csv)
    frame = read_csv(out)
    assert frame.columns == ["statistic", "category", "value", "ci_low", "ci_high", "n", "status"]
    by = {(r["statistic"], r["category"]): r for r in frame.iter_rows(named=True)}
    assert by[("raw_agreement", None)]["value"] == 0.75 and by[("kappa", None)]["value"] == pytest.approx(s["kappa"])
    assert by[("prevalence_a", "=1+1")]["value"] == 0.5 and by[("prevalence_b", "=1+1")]["value"] == 0.25
    assert by[("saturated", None)]["value"] == 1.0  # b: 3 of 4 in "b"


def test_parquet_table(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pl.DataFrame({"x": [1, 1, 0, 2], "y": [1, 0, 0, 2], "other": ["a"] * 4}).write_parquet(path)
    s = _ok(legival("agreement", path, "--a", "x", "--b", "y", "--categories", "3"))
    assert s["n"] == 4 and s["raw_agreement"] == 0.75


def test_gzip_csv_is_read_as_csv(tmp_path: Path) -> None:
    import gzip

    plain = _paradox(tmp_path)
    packed = tmp_path / "flags.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    s = _ok(legival("agreement", packed, "--a", "judge", "--b", "human", "--resamples", "0"))
    assert (s["n"], s["raw_agreement"]) == (200, 0.97)


def test_undefined_kappa_is_null_with_its_reason(tmp_path: Path) -> None:
    path = _table(tmp_path / "t.csv", [1, 1, 1], [1, 1, 1])
    s = _ok(legival("agreement", path, "--a", "judge", "--b", "human", "--categories", "2"))
    assert s["kappa"] is None and "chance agreement 1" in s["kappa_note"] and s["ac1"] == 1.0


@pytest.mark.parametrize(("a", "b", "options", "fragments"), [
    ([0, 1, 5], [0, 1, 1], ("--categories", "4"), ("t.csv:4: field 'judge': label 5 is outside 0..3",)),
    ([0, 1, 1], [0, "", 1], (), ("t.csv:3: field 'human': no label",)),
    ([0, "x", 1], [0, 1, 1], ("--ordinal",), ("t.csv:3: field 'judge': expected a whole-number label", "'x'")),
    ([0, 1.5, 1], [0, 1, 1], ("--categories", "2"), ("t.csv:3: field 'judge'", "'1.5'")),
], ids=["outside", "empty", "not-integer", "not-whole"])
def test_a_bad_row_is_one_error_line(tmp_path: Path, a: list[object], b: list[object], options: tuple[str, ...],
                                     fragments: tuple[str, ...]) -> None:
    path = _table(tmp_path / "t.csv", a, b)
    legival("agreement", path, "--a", "judge", "--b", "human", *options).error(*fragments)


def test_a_missing_column_an_empty_table_and_a_bad_parquet_row(tmp_path: Path) -> None:
    path = _table(tmp_path / "t.csv", [0], [0])
    legival("agreement", path, "--a", "judge", "--b", "nope").error("t.csv: no column 'nope'", "'item', 'judge'")
    empty = _table(tmp_path / "e.csv", [], [])
    legival("agreement", empty, "--a", "judge", "--b", "human").error("e.csv: no rows")
    pq = tmp_path / "t.parquet"
    pl.DataFrame({"x": [1, None], "y": [1, 1]}).write_parquet(pq)
    legival("agreement", pq, "--a", "x", "--b", "y").error("t.parquet row 2: field 'x': no label")
    legival("agreement", tmp_path / "none.csv", "--a", "x", "--b", "y").error("none.csv: no such file")
