"""The papers' tables and figures (issue 15 items 7, 8, 11) on a hand-built store with two students.

Three teachers on gsm8k. p1 and p2 are correct with one step (depths K = {0, 1}, bin(1) = 50), so a
(trace, student) pair with correctness (y0, y1) has FOTU = y0 + 0.51 (y1 - y0), RR = 1 when y1 < y0,
and its first success (if any) in bin 50. p3: t1 correct with no step (no transfer), t2 and t3 wrong.

    student s1: t1 (0,1) (0,1)   t2 (0,1) (0,0)   t3 (0,0) (0,0)
    student s2: t1 (0,0) (0,0)   t2 (0,1) (1,0)   t3 (0,1) (0,0)

so FOTU(teacher, student): t1 .51 / 0, t2 .255 / .5, t3 0 / .255; teacher FOTU = .255, .3775, .1275;
RR: t2 on s2 .5, else 0 (teacher: 0, .25, 0); SOTU = 0 wherever a trace has a first success (all
first successes in one bin), undefined for t1 on s2 and t3 on s1; accuracy 1, 2/3, 2/3.
Every expected number below is derived from these by hand.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from legival_core.reports.paper.tables import PAPER_CSV
from legival_core.reports.render.paper_plots import PAPER_PLOTS
from legival_core.reports.render.paper_sections import SECTIONS, fmt_cell
from legival_core.reports.stage import ReportConfig, build_reports
from legival_core.rewards.models import RM_CODE_VERSION
from legival_core.store import Store

TEACHERS = ("t1", "t2", "t3")
Y: dict[str, dict[tuple[str, str], tuple[int, int]]] = {
    "s1": {("t1", "p1"): (0, 1), ("t1", "p2"): (0, 1), ("t2", "p1"): (0, 1), ("t2", "p2"): (0, 0),
           ("t3", "p1"): (0, 0), ("t3", "p2"): (0, 0)},
    "s2": {("t1", "p1"): (0, 0), ("t1", "p2"): (0, 0), ("t2", "p1"): (0, 1), ("t2", "p2"): (1, 0),
           ("t3", "p1"): (0, 1), ("t3", "p2"): (0, 0)},
}
RM = {("t1", "p1"): 0.1, ("t1", "p2"): 0.3, ("t1", "p3"): 0.2, ("t2", "p1"): 0.5, ("t2", "p2"): 0.7,
      ("t2", "p3"): 0.6, ("t3", "p1"): 0.4, ("t3", "p2"): 0.4, ("t3", "p3"): 0.4}
CLX = {"t1": (0.2, 0.4, 0.6), "t2": (0.5, 0.5, 0.8), "t3": (0.1, 0.2, 0.3)}
RD = {"t1": (0.1, 0.2, 0.3), "t2": (0.4, 0.4, 0.4), "t3": (0.0, 0.0, 0.3)}
BERT_T1 = (0.5, 0.9, 1.1)
UNAVAILABLE = "pip install bert-score"


def tid(t: str, p: str) -> str:
    return f"{t}|gsm8k|{p}"


def fill(store: Store) -> None:
    from legival_core.datasets.base import grader_key
    from legival_core.segment import SEGMENTER_VERSION

    traces, grades, counts = [], [], []
    for t in TEACHERS:
        for p in ("p1", "p2", "p3"):
            no_step = t == "t1" and p == "p3"
            correct = p != "p3" or t == "t1"
            traces.append({"trace_id": tid(t, p), "teacher": t, "dataset": "gsm8k", "problem_id": p,
                           "reasoning": "" if no_step else "We add.", "answer_text": "\\boxed{1}", "truncated": False})
            grades.append({"trace_id": tid(t, p), "grader": grader_key("gsm8k"), "extracted": "1",
                           "correct": correct, "status": "ok"})
            counts.append({"trace_id": tid(t, p), "segmenter": SEGMENTER_VERSION, "m": 0 if no_step else 1})
    store.insert_rows("traces", traces)
    store.insert_rows("grades", grades)
    store.insert_rows("step_counts", counts)
    store.insert_rows("students", [{"student_key": f"key-{s}", "name": s, "model": s, "decoding": "greedy",
                                    "prompt_version": "1", "profile": "hand"} for s in Y])
    rollouts = []
    for s, cells in Y.items():
        for (t, p), ys in cells.items():
            for k, y in zip((0, 1), ys, strict=True):
                rollouts.append({"trace_id": tid(t, p), "student_key": f"key-{s}", "k": k, "sample": 0, "m": 1,
                                 "bin": 50 * k, "status": "ok", "correct": bool(y), "forced": False,
                                 "extracted": "1", "grade_status": "ok", "prompt_tokens": 10, "completion_tokens": 5})
    store.insert_rows("rollouts", rollouts)
    metrics: list[dict[str, Any]] = []

    def row(trace: str, metric: str, value: float | None, status: str = "ok", detail: str | None = None,
            version: str = "q-1") -> None:
        metrics.append({"trace_id": trace, "metric": metric, "params": "{}", "code_version": version,
                        "value": value, "method": "hand", "status": status, "detail": detail})

    for (t, p), v in RM.items():
        row(tid(t, p), "rm:skywork-v2-llama-8b", v, version=RM_CODE_VERSION)
        row(tid(t, p), "rm:rb2-llama-8b", None, "unavailable", json.dumps({"reason": "no weights here"}),
            RM_CODE_VERSION)
    for t in TEACHERS:
        for i, p in enumerate(("p1", "p2", "p3")):
            row(tid(t, p), "clarity_clx", CLX[t][i], detail=json.dumps({"fre": 60.0 + i, "ss_complexity": 3.5}))
            row(tid(t, p), "clarity_rd", RD[t][i])
            row(tid(t, p), "clarity_se", 0.5)
            row(tid(t, p), "clarity_dc", 1.0)
            row(tid(t, p), "clarity_ss", 0.25 * (i + 1))
            if t == "t1":
                row(tid(t, p), "bertscore_f1", BERT_T1[i])
            elif t == "t2":
                row(tid(t, p), "bertscore_f1", None, "unavailable", json.dumps({"reason": UNAVAILABLE}))
    store.insert_rows("trace_metrics", metrics)
    verdicts = [("t1", "p1", "clean", False, "ok"), ("t1", "p1", "sabotage", True, "ok"),
                ("t2", "p3", "natural", True, "ok"), ("t3", "p3", "natural", None, "overflow")]
    store.insert_rows("monitor_results", [
        {"item_key": f"i{i}", "supervisor_key": "sk", "supervisor": "sup", "trace_id": tid(t, p), "teacher": t,
         "dataset": "gsm8k", "problem_id": p, "condition": c, "label_incorrect": c != "clean",
         "predicted_incorrect": flag, "status": st} for i, (t, p, c, flag, st) in enumerate(verdicts)])


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("paper")
    with Store(d / "s.duckdb") as store:
        fill(store)
        build_reports(store, d / "out", ReportConfig(resamples=20))
    return d / "out"


def csv(out: Path, name: str) -> list[dict[str, str]]:
    import csv as _csv

    with (out / name).open(encoding="utf-8", newline="") as fh:
        return list(_csv.DictReader(fh))


def num(v: str) -> float | None:
    return None if v == "" else float(v)


def approx(v: str, want: float | None) -> bool:
    got = num(v)
    return got is None if want is None else got is not None and math.isclose(got, want, abs_tol=1e-9)


def pick(rows: list[dict[str, str]], **key: str) -> dict[str, str]:
    hits = [r for r in rows if all(r[k] == v for k, v in key.items())]
    assert len(hits) == 1, (key, hits)
    return hits[0]


def test_files_and_pngs_are_written(report: Path) -> None:
    for name in (*PAPER_CSV, *PAPER_PLOTS):
        assert (report / name).is_file() and (report / name).stat().st_size > 0, name
    for name in PAPER_PLOTS:
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rank_points_fig1(report: Path) -> None:
    rows = csv(report, "rank_points.csv")
    # fotu: t2 1st (3 points), t1 2nd (2), t3 3rd (1); sotu: all 0, tied first (3 each);
    # regression rate (lower): t1 and t3 0 (3 each), t2 0.25 (1); efficiency not run: no points.
    want = {"t1": (1, 8.0, 2.0, 3.0, 3.0), "t2": (2, 7.0, 3.0, 3.0, 1.0), "t3": (2, 7.0, 1.0, 3.0, 3.0)}
    for dataset in ("all", "gsm8k"):
        for t, (rank, total, fotu, sotu, rr) in want.items():
            r = pick(rows, dataset=dataset, teacher=t)
            assert int(r["global_rank"]) == rank and approx(r["rank_points"], total) and r["n_metrics"] == "3"
            assert approx(r["points_fotu"], fotu) and approx(r["points_sotu"], sotu)
            assert approx(r["points_regression_rate"], rr) and r["points_token_len_median"] == ""
            assert "token_len_median: not run (legival efficiency --db DB)" in r["missing"]
    assert [r["teacher"] for r in rows[:3]] == ["t1", "t2", "t3"]


def test_accuracy_frontier_fig4(report: Path) -> None:
    rows = csv(report, "accuracy_frontier.csv")
    fotu = {r["teacher"]: r for r in rows if r["metric"] == "fotu"}
    assert approx(fotu["t1"]["accuracy"], 1.0) and approx(fotu["t2"]["accuracy"], 2 / 3)
    assert approx(fotu["t1"]["value"], 0.255) and approx(fotu["t2"]["value"], 0.3775)
    assert approx(fotu["t3"]["value"], 0.1275)
    assert [fotu[t]["on_frontier"] for t in TEACHERS] == ["true", "true", "false"]
    for metric in ("sotu", "regression_rate"):  # t1: best accuracy, and the best value (tied or not)
        assert [pick(rows, metric=metric, teacher=t)["on_frontier"] for t in TEACHERS] == ["true", "false", "false"]
    assert {r["status"] for r in rows} == {"computed"}


def test_fotu_scatter_fig5(report: Path) -> None:
    rows = csv(report, "fotu_scatter.csv")
    acc = pick(rows, panel="accuracy", teacher="t1")
    # ranks: accuracy (3, 1.5, 1.5), fotu (2, 3, 1): the centred ranks are orthogonal, rho = 0, p = 1
    assert approx(acc["rho"], 0.0) and approx(acc["p_value"], 1.0) and acc["n"] == "3"
    assert pick(rows, panel="sotu", teacher="t2")["rho"] == ""  # SOTU is constant: no correlation
    sky = [r for r in rows if r["panel"] == "rm_skywork-v2-llama-8b"]
    assert [num(r["x"]) for r in sky] == pytest.approx([0.2, 0.6, 0.4])
    # ranks rm (1, 3, 2) vs fotu (2, 3, 1): rho = 1 - 6*2/24 = 0.5; t = 0.5 sqrt(1/0.75), p = 2/3
    assert approx(sky[0]["rho"], 0.5) and math.isclose(float(sky[0]["p_value"]), 2 / 3, rel_tol=1e-9)
    rb2 = [r for r in rows if r["panel"] == "rm_rb2-llama-8b"]
    assert len(rb2) == 3 and all(r["x"] == "" and r["status"] == "unavailable" and r["detail"] == "no weights here"
                                 for r in rb2)
    prm = [r for r in rows if r["panel"] == "rm_qwen2.5-math-prm-7b_mean"]
    assert prm and all(r["status"] == "not run" and r["detail"] == "legival rm --db DB" for r in prm)


def test_rank_by_student_fig8(report: Path) -> None:
    rows = csv(report, "rank_by_student.csv")

    def rank(metric: str, student: str, teacher: str) -> str:
        return pick(rows, metric=metric, student=student, teacher=teacher)["rank"]

    assert [rank("fotu", "s1", t) for t in TEACHERS] == ["1", "2", "3"]
    assert [rank("fotu", "s2", t) for t in TEACHERS] == ["3", "1", "2"]
    assert approx(pick(rows, metric="fotu", student="s2", teacher="t2")["value"], 0.5)
    assert [rank("regression_rate", "s2", t) for t in TEACHERS] == ["1", "3", "1"]
    assert [rank("sotu", "s1", t) for t in TEACHERS] == ["1", "1", ""]
    assert pick(rows, metric="sotu", student="s1", teacher="t3")["status"] == "too few traces"


def test_tables_4_and_5_across_two_students(report: Path) -> None:
    st = [r for r in csv(report, "rank_stability.csv") if r["axis"] == "student"]
    fotu = pick(st, metric="fotu", group_a="s1", group_b="s2")
    # ranks (3, 2, 1) vs (1, 3, 2): rho = 1 - 6*6/24 = -0.5; t = -0.5 sqrt(1/0.75), 1 dof: p = 2/3
    assert approx(fotu["rho"], -0.5) and math.isclose(float(fotu["p_value"]), 2 / 3, rel_tol=1e-9)
    assert pick(st, metric="regression_rate", group_a="s1", group_b="s2")["rho"] == ""  # constant on s1
    assert pick(st, metric="sotu", group_a="s1", group_b="s2")["n"] == "1"
    dt = csv(report, "delta_tu.csv")
    assert [num(pick(dt, teacher=t, metric="fotu")["abs_delta"]) for t in TEACHERS] == pytest.approx(
        [0.51, 0.245, 0.255])
    assert [num(pick(dt, teacher=t, metric="regression_rate")["abs_delta"]) for t in TEACHERS] == pytest.approx(
        [0.0, 0.5, 0.0])
    assert pick(dt, teacher="t1", metric="sotu")["abs_delta"] == ""  # t1 has no first success on s2


def test_rm_correlations_fig7_and_table6(report: Path) -> None:
    rows = csv(report, "rm_correlations.csv")
    trace = pick(rows, level="trace", subset="all", rm="rm:skywork-v2-llama-8b", metric="fotu")
    # six transfer traces (rm, mean FOTU over students): (.1,.255) (.3,.255) (.5,.51) (.7,.245) (.4,.255)
    # (.4,0); average ranks rm (1,2,5,6,3.5,3.5), fotu (4,4,6,2,4,1): cov -2, var 17 and 15.5
    assert trace["n"] == "6" and approx(trace["spearman"], -2 / math.sqrt(17 * 15.5))
    model = pick(rows, level="model", subset="all", rm="rm:skywork-v2-llama-8b", metric="fotu")
    assert model["n"] == "3" and approx(model["spearman"], 0.5)  # the RM-mean rows: teachers' mean scores
    acc = pick(rows, level="model", subset="all", rm="rm:skywork-v2-llama-8b", metric="accuracy")
    assert approx(acc["spearman"], -1.5 / math.sqrt(3.0))
    rb2 = pick(rows, rm="rm:rb2-llama-8b")
    assert rb2["status"] == "unavailable" and rb2["detail"] == "no weights here" and rb2["level"] == ""
    assert pick(rows, rm="rm:qwen2.5-math-prm-7b:mean")["status"] == "not run"


def test_gcot_clarity_profile(report: Path) -> None:
    rows = {r["teacher"]: r for r in csv(report, "clarity_profile.csv")}
    for t in TEACHERS:
        assert approx(rows[t]["clarity_clx"], sum(CLX[t]) / 3) and approx(rows[t]["clarity_rd"], sum(RD[t]) / 3)
        assert approx(rows[t]["clarity_se"], 0.5) and approx(rows[t]["clarity_ss"], 0.5)
        assert rows[t]["n_traces"] == "3" and rows[t]["status"] == "computed"


def test_gcot_clx_regression_table4(report: Path) -> None:
    rows = csv(report, "clx_regression.csv")
    r = pick(rows, teacher="t1", metric="bertscore_f1")
    # x = (.2, .4, .6), y = (.5, .9, 1.1): Sxx = .08, Sxy = .12, slope 1.5, intercept .8333 - .6;
    # SSE = 1/150, se = sqrt(SSE / 1 / Sxx); with 1 dof t is Cauchy: t.975 = tan(.475 pi)
    se = math.sqrt((1 / 150) / 0.08)
    half = math.tan(0.475 * math.pi) * se
    assert r["n"] == "3" and approx(r["slope"], 1.5) and approx(r["intercept"], 2.5 / 3 - 1.5 * 0.4)
    assert math.isclose(float(r["ci_low"]), 1.5 - half, rel_tol=1e-9)
    assert math.isclose(float(r["ci_high"]), 1.5 + half, rel_tol=1e-9)
    assert math.isclose(float(r["r2"]), 0.12**2 / (0.08 * (0.56 / 3)), rel_tol=1e-9)
    assert math.isclose(float(r["p_value"]), 1 - 2 * math.atan(1.5 / se) / math.pi, rel_tol=1e-9)
    t2 = pick(rows, teacher="t2", metric="bertscore_f1")
    assert t2["slope"] == "" and t2["status"] == "unavailable" and t2["detail"] == UNAVAILABLE
    t3 = pick(rows, teacher="t3", metric="bertscore_f1")
    assert t3["status"] == "not run" and t3["detail"] == "legival quality --db DB"
    assert {r["status"] for r in rows if r["metric"] == "bleurt"} == {"not run"}


def test_gcot_dimensions(report: Path) -> None:
    rows = csv(report, "gcot_dimensions.csv")
    # CLX means .4, .6, .2 -> min-max .5, 1, 0; informativeness: only t1 has BERTScore -> 0.5
    clarity = {t: pick(rows, dimension="clarity", teacher=t) for t in TEACHERS}
    assert [num(clarity[t]["score"]) for t in TEACHERS] == pytest.approx([0.5, 1.0, 0.0])
    assert [clarity[t]["rank"] for t in TEACHERS] == ["2", "1", "3"]
    assert approx(clarity["t1"]["rho_global_index"], 1.0) and clarity["t1"]["members"] == "clarity_clx_norm"
    gi = {t: pick(rows, dimension="global_index", teacher=t) for t in TEACHERS}
    assert [num(gi[t]["score"]) for t in TEACHERS] == pytest.approx([0.5, 1.0, 0.0])
    assert gi["t1"]["n_members"] == "2" and gi["t2"]["n_members"] == "1"
    info = pick(rows, dimension="informativeness", teacher="t2")
    assert info["score"] == "" and info["status"] == "unavailable"
    assert f"bertscore_f1: unavailable ({UNAVAILABLE})" in info["detail"] and "bleurt: not run" in info["detail"]
    assert approx(pick(rows, dimension="informativeness", teacher="t1")["score"], 0.5)


def test_traces_parquet_carries_every_per_trace_metric(report: Path) -> None:
    from legival_core.reports.compute.trace_export import export_columns

    tr = pl.read_parquet(report / "traces.parquet")
    assert tr.columns[-len(export_columns()):] == export_columns()
    row = {r["trace_id"]: r for r in tr.iter_rows(named=True)}
    assert row[tid("t2", "p2")]["fotu"] == pytest.approx(0.245)  # (0 + .49) / 2
    assert row[tid("t2", "p2")]["regression_rate"] == pytest.approx(0.5)
    assert row[tid("t1", "p3")]["fotu"] is None  # no step: no transfer
    assert row[tid("t1", "p2")]["rm_skywork-v2-llama-8b"] == pytest.approx(0.3)
    assert row[tid("t1", "p2")]["rm_rb2-llama-8b"] is None
    assert row[tid("t1", "p3")]["clarity_clx"] == pytest.approx(0.6)
    assert row[tid("t1", "p3")]["clarity_raw_fre"] == pytest.approx(62.0)
    assert row[tid("t1", "p3")]["clarity_raw_ss_complexity"] == pytest.approx(3.5)
    assert row[tid("t2", "p1")]["bertscore_f1"] is None and row[tid("t1", "p1")]["bertscore_f1"] == 0.5
    assert row[tid("t1", "p1")]["cohesion"] is None and row[tid("t1", "p1")]["z3_acs"] is None
    assert row[tid("t1", "p1")]["monitor_flagged_clean"] is False
    assert row[tid("t1", "p1")]["monitor_flagged_sabotage"] is True
    assert row[tid("t2", "p3")]["monitor_flagged_natural"] is True
    assert row[tid("t3", "p3")]["monitor_flagged_natural"] is None  # overflowed prompt


class _Tables:
    """The cells of every `<table data-file=...>` of the page (HTML-unescaped text)."""

    def __init__(self, page: str) -> None:
        self.tables: dict[str, list[list[str]]] = {}
        for name, body in re.findall(r'<table class="grid" data-file="([^"]+)">(.*?)</table>', page, re.S):
            rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
            self.tables[html.unescape(name)] = [
                [html.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", r, re.S)] for r in rows]


def _same(cell: str, value: str) -> bool:
    if value == "":  # a missing value, or an empty detail (a computed row has no reason to give)
        return cell in ("\u2013", "")
    if value in ("true", "false"):
        return cell == ("yes" if value == "true" else "no")
    try:
        return cell == fmt_cell(float(value)) or cell == fmt_cell(int(value))
    except ValueError:
        return cell == value


def test_dashboard_sections_show_the_csv_numbers(report: Path) -> None:
    page = (report / "index.html").read_text(encoding="utf-8")
    tables = _Tables(page).tables
    shown = [f for s in SECTIONS for f in s.tables]
    assert set(PAPER_CSV) <= set(shown)
    for s in SECTIONS:
        assert f'<section id="{s.id}"' in page and f'data-name="{s.png}"' in page
    for name in shown:
        rows = csv(report, name)
        if name == "rank_stability.csv":
            rows = [r for r in rows if r["axis"] == "student"]
        cells = tables[name]
        assert cells[0] == list(rows[0].keys()), name
        assert len(cells) == len(rows) + 1, name
        for got, want in zip(cells[1:], rows, strict=True):
            for c, v in zip(got, want.values(), strict=True):
                assert _same(c, v), (name, c, v)
    assert html.escape("legival rm --db DB") in page and "unavailable" in page
    assert page.count("<script") == 2


def test_one_schema_whatever_ran(tmp_path: Path, report: Path) -> None:
    """A store with traces only (nothing graded, no rollouts, no quality, no RM): the same files with
    the same columns, every value missing with its reason."""
    with Store(tmp_path / "bare.duckdb") as store:
        store.insert_rows("traces", [{"trace_id": f"x{i}", "teacher": t, "dataset": "gsm8k", "problem_id": f"p{i}",
                                      "reasoning": "We add.", "answer_text": "1", "truncated": False}
                                     for i, t in enumerate(("a", "b"))])
        build_reports(store, tmp_path / "out", ReportConfig(resamples=0))
    for name in PAPER_CSV:
        full, bare = csv(report, name), csv(tmp_path / "out", name)
        with (tmp_path / "out" / name).open(encoding="utf-8") as fh:
            header = fh.readline().strip().split(",")
        assert header == list(full[0].keys()), name
        assert bare, f"{name}: no rows, the reason would be lost"
        assert all(r["status"] != "computed" and r["detail"] for r in bare if "status" in r), name
    assert all(r["missing"] and r["rank_points"] == "" for r in csv(tmp_path / "out", "rank_points.csv"))
    assert pl.read_parquet(tmp_path / "out" / "traces.parquet").columns == pl.read_parquet(
        report / "traces.parquet").columns
    assert (tmp_path / "out" / "fotu_scatter.png").is_file()
