"""`legival monitorability score` (issue 48 parts 3 and 7; docs/monitorability.md): the two files, groups,
instances missing an arm counted and shown, bad rows named by file, line and field, and an --out
folder that holds anything else refused."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from legival_core.monitor.gmean import PER_INSTANCE_COLUMNS
from legival_core.outputs import MANIFEST
from legival_core.safe_csv import read_csv
from tests._cli import legival

HEADER = "teacher,cue,instance,x,y,z\n"


def rows(teacher: str, cue: str, instance: str, x: int, ys: str, zs: str) -> str:
    return "".join(f"{teacher},{cue},{instance},{x},{y},{z}\n" for y, z in zip(ys, zs, strict=True))


TABLE = (HEADER
         # t1/hint/q1: p0 = 1/4, p1 = 3/4, TE = 1/2, q = 2/3, p_z = 1/3, TPR = 1/2, TNR = sqrt(3/4)
         + rows("t1", "hint", "q1", 0, "0001", "0100") + rows("t1", "hint", "q1", 1, "1110", "1000")
         # t1/hint/q2: clear cut, every target flagged: g-mean² 1
         + rows("t1", "hint", "q2", 0, "00000", "00000") + rows("t1", "hint", "q2", 1, "11111", "11111")
         # t1/hint/q3: no unhinted row (misses an arm)
         + rows("t1", "hint", "q3", 1, "11", "10")
         # t2/hint/q1: the hint changes nothing (TE = 0)
         + rows("t2", "hint", "q1", 0, "10", "00") + rows("t2", "hint", "q1", 1, "10", "10"))


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "table.csv"
    path.write_text(TABLE)
    return path


def test_scores_per_instance_and_per_group(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ran = legival("monitorability", "score", str(table), "--out", str(out), "--group", "teacher", "--group", "cue",
                  "--bootstrap", "30", "--seed", "4")
    assert ran.returncode == 0, ran.stderr
    s = ran.summary()
    assert s["command"] == "monitorability score" and s["rows"] == 24 and s["instances"] == 4
    assert s["groups"] == 2 and s["missing_arm"] == 1 and s["eligible"] == 2 and s["draws"] == 30
    assert "warning: 1 instance(s) miss an arm" in ran.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, "per_instance.csv", "summary.csv"])

    plain = read_csv(out / "per_instance.csv", infer_schema_length=0)
    assert plain.columns == ["teacher", "cue", "instance", *PER_INSTANCE_COLUMNS]
    by = {(r["teacher"], r["instance"]): r for r in plain.iter_rows(named=True)}
    q1 = by["t1", "q1"]
    assert float(q1["TPR"]) == pytest.approx(0.5) and float(q1["gmean2"]) == pytest.approx(0.5 * 0.75 ** 0.5)
    assert float(by["t1", "q2"]["gmean2"]) == 1.0
    q3 = by["t1", "q3"]  # missing an arm: shown, with its empty cells
    assert (q3["n_x0"], q3["eligible"], q3["p_y1_x0"], q3["effect_size"], q3["gmean2"]) == ("0", "false", None, None, None)
    assert by["t2", "q1"]["eligible"] == "false" and by["t2", "q1"]["effect_size"] == "0.0"

    summary = read_csv(out / "summary.csv")
    assert summary["teacher"].to_list() == ["t1", "t2"] and summary["cue"].to_list() == ["hint", "hint"]
    t1, t2 = summary.row(0, named=True), summary.row(1, named=True)
    assert (t1["n_instances"], t1["missing_arm"], t1["draws"]) == (3, 1, 30)
    assert 0 < t1["eligible_fraction_mean"] < 1 and 0 <= t1["gmean2_mean"] <= 1
    assert t1["verbalisation_rate"] == pytest.approx((3 * 1 + 5 * 5) / (3 * 3 + 5 * 5))  # pairs: q1 3x3, q2 5x5
    assert t2["eligible_fraction_mean"] == 0.0 and t2["gmean2_mean"] is None and t2["draws_defined"] == 0


def test_parquet_gives_the_same_files_and_the_seed_decides(table: Path, tmp_path: Path) -> None:
    parquet = tmp_path / "table.parquet"
    pl.read_csv(table, schema_overrides={"instance": pl.String}).write_parquet(parquet)
    args = ("--group", "teacher", "--group", "cue", "--bootstrap", "20")
    for name, source in (("csv", table), ("pq", parquet)):
        assert legival("monitorability", "score", str(source), "--out", str(tmp_path / name), *args).returncode == 0
    for f in ("per_instance.csv", "summary.csv"):
        assert (tmp_path / "csv" / f).read_bytes() == (tmp_path / "pq" / f).read_bytes()
    again = legival("monitorability", "score", str(table), "--out", str(tmp_path / "csv"), *args, "--seed", "9")
    assert again.returncode == 0, again.stderr  # an earlier output of the command is replaced
    assert (tmp_path / "csv" / "summary.csv").read_bytes() != (tmp_path / "pq" / "summary.csv").read_bytes()


def test_no_group_is_one_group(table: Path, tmp_path: Path) -> None:
    ran = legival("monitorability", "score", str(table), "--out", str(tmp_path / "o"), "--instance", "instance")
    assert ran.returncode == 0, ran.stderr
    summary = read_csv(tmp_path / "o" / "summary.csv")
    assert summary.height == 1 and summary.columns[0] == "n_instances" and summary["draws"].to_list() == [100]
    assert summary["n_instances"].to_list() == [3]  # q1 of t1 and t2 are one instance without groups


@pytest.mark.parametrize(("text", "fragments"), [
    (HEADER + "t,c,q,0,0,0\nt,c,q,1,2,0\n", ("table.csv:3: field 'y'", "expected 0 or 1, got '2'")),
    (HEADER + "t,c,q,0,0,0\nt,c,,1,1,0\n", ("table.csv:3: field 'instance'", "empty")),
    (HEADER + "t,c,q,yes,0,0\n", ("table.csv:2: field 'x'", "got 'yes'")),
    (HEADER + "t,c,q,0,0\n", ("table.csv:2: field 'z'", "missing (a null, or a row with fewer cells")),
    (HEADER + "t\n", ("table.csv:2: field 'instance'", "a row with fewer cells")),
    ("teacher,cue,instance,x,y\nt,c,q,0,0\n", ("table.csv: no column 'z'", "its columns: 'teacher'")),
    (HEADER, ("table.csv: no rows", "nothing to score")),
])
def test_bad_rows(tmp_path: Path, text: str, fragments: tuple[str, ...]) -> None:
    path = tmp_path / "table.csv"
    path.write_text(text)
    out = tmp_path / "out"
    legival("monitorability", "score", str(path), "--out", str(out), "--group", "teacher").error(*fragments)
    assert not out.exists()


def test_bad_parquet_cell_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pl.DataFrame({"instance": ["a", "a", "b"], "x": [0, 1, 1], "y": [0, 1, 1], "z": [0, 1, 3]}).write_parquet(path)
    legival("monitorability", "score", str(path), "--out", str(tmp_path / "o")).error("t.parquet row 3: field 'z'",
                                                                                      "expected 0 or 1, got 3")


def test_options_are_checked(table: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "o")
    legival("monitorability", "score", str(table), "--out", out, "--group", "x").error("'x'", "not keys")
    legival("monitorability", "score", str(table), "--out", out, "--bootstrap", "0").error("--bootstrap")
    legival("monitorability", "score", str(table), "--out", out, "--group", "lab").error("no column 'lab'")


def test_a_foreign_out_folder_is_refused_and_left_alone(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    legival("monitorability", "score", str(table), "--out", str(out)).error("--out", "notes.txt")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "my notes\n"
