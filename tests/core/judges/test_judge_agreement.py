"""Human-vs-judge agreement statistics (Legi-Val appendix A.3.4) against hand-computed values."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import kendalltau, spearmanr

from legival_core.agreement import agreement as rater_agreement
from legival_core.judges import HumanAnnotation, agreement, load_human_annotations
from legival_core.stages.ingest import ingest_file
from legival_core.store import Store
from tests._cli import Ran
from tests._cli import legival as run_legival
from tests._sql import rows as q
from tests.conftest import EXAMPLES

A = [0, 1, 2, 0, 1]
B = [0, 2, 2, 0, 1]
J = [0, 1, 1, 0, 2]


def cohen_kappa(a: list[Any], b: list[Any]) -> float | None:
    """The kappa the judge agreement reports (`legival_core.agreement`, the project's one kappa)."""
    return rater_agreement(a, b).kappa


def test_kappa_by_hand() -> None:
    # A vs J exact counts: agree on items 1, 2, 4 -> p_o = 3/5 = 0.6.
    # Marginals A {0:2, 1:2, 2:1}, J {0:2, 1:2, 2:1} -> p_e = (2*2 + 2*2 + 1*1) / 25 = 9/25 = 0.36.
    # kappa = (0.6 - 0.36) / (1 - 0.36) = 0.24 / 0.64 = 0.375.
    assert cohen_kappa(A, J) == pytest.approx(0.375)
    # A vs B: agree on items 1, 3, 4, 5 -> p_o = 0.8; B {0:2, 1:1, 2:2} -> p_e = (4 + 2 + 2) / 25 = 0.32.
    # kappa = 0.48 / 0.68 = 12/17.
    assert cohen_kappa(A, B) == pytest.approx(12 / 17)
    # Binary A>0 = [F,T,T,F,T] equals J>0 -> p_o = 1, p_e = (2*2 + 3*3)/25 = 13/25, kappa = 1.
    assert cohen_kappa([x > 0 for x in A], [x > 0 for x in J]) == pytest.approx(1.0)
    # Binary [F,T,F,T] vs [F,T,T,T]: p_o = 3/4; p_e = (2*1 + 2*3)/16 = 0.5 -> kappa = 0.25 / 0.5 = 0.5.
    assert cohen_kappa([0, 1, 0, 1], [0, 1, 1, 1]) == pytest.approx(0.5)
    assert cohen_kappa([1, 1], [1, 1]) is None  # p_e = 1: undefined
    sk = pytest.importorskip("sklearn.metrics")
    assert cohen_kappa(A, B) == pytest.approx(sk.cohen_kappa_score(A, B))


def sample() -> tuple[list[HumanAnnotation], dict[str, int], dict[str, str]]:
    human = []
    judge: dict[str, int] = {}
    datasets: dict[str, str] = {}
    for i, (a, b, j) in enumerate(zip(A, B, J, strict=True)):
        human += [HumanAnnotation(f"m{i}", "ann1", a), HumanAnnotation(f"m{i}", "ann2", b)]
        judge[f"m{i}"] = j
        datasets[f"m{i}"] = "math"
    for i, (a, j) in enumerate([(3, 2), (0, 0), (1, 2), (2, 3)]):
        human.append(HumanAnnotation(f"g{i}", "ann1", a))
        judge[f"g{i}"] = j
        datasets[f"g{i}"] = "gpqa"
    human.append(HumanAnnotation("failed-trace", "ann1", 4))  # the judge failed on it
    datasets["failed-trace"] = "gpqa"
    human.append(HumanAnnotation("orphan", "ann1", 1))  # no dataset known
    return human, judge, datasets


def test_agreement_report() -> None:
    human, judge, datasets = sample()
    rep = agreement(human, judge, datasets)
    assert rep.n_traces == 9 and rep.skipped_no_judge == 1 and rep.skipped_no_dataset == 1
    gpqa, math_ = rep.per_dataset
    assert (gpqa.dataset, gpqa.n_traces, math_.dataset, math_.n_traces) == ("gpqa", 4, "math", 5)
    a1, a2 = math_.human_vs_judge
    assert (a1.a, a1.b, a1.n) == ("ann1", "judge", 5)
    assert a1.spearman == pytest.approx(spearmanr(A, J).statistic)
    assert a2.spearman == pytest.approx(spearmanr(B, J).statistic)
    assert a1.kappa_counts == pytest.approx(0.375) and a1.kappa_binary == pytest.approx(1.0)
    (hh,) = math_.human_vs_human
    assert (hh.a, hh.b, hh.n) == ("ann1", "ann2", 5) and hh.kappa_counts == pytest.approx(12 / 17)
    assert hh.spearman == pytest.approx(spearmanr(A, B).statistic)
    g1, g2 = gpqa.human_vs_judge
    assert g1.spearman == pytest.approx(spearmanr([3, 0, 1, 2], [2, 0, 2, 3]).statistic)
    assert g2.n == 0 and g2.spearman is None and g2.kappa_counts is None
    assert gpqa.human_vs_human[0].n == 0
    # Kendall across datasets: mean human count per trace (gpqa first, as datasets are sorted) vs judge.
    mean_h = [3, 0, 1, 2] + [(a + b) / 2 for a, b in zip(A, B, strict=True)]
    js = [2, 0, 2, 3] + J
    assert rep.kendall_tau_mean_human_vs_judge == pytest.approx(kendalltau(mean_h, js).statistic)
    per = dict(rep.kendall_tau_per_annotator)
    assert per["ann1"] == pytest.approx(kendalltau([3, 0, 1, 2] + A, js).statistic)
    assert per["ann2"] == pytest.approx(kendalltau(B, J).statistic)


def test_load_csv_and_jsonl(tmp_path: Path) -> None:
    csv_p = tmp_path / "h.csv"
    csv_p.write_text("trace_id,annotator,steps,count\nt1,ann1,3;7,\nt2,ann1,,0\nt3,ann2,,2\nt4,ann2,,\n")
    got = load_human_annotations(csv_p)
    assert [(a.trace_id, a.count, a.steps) for a in got] == [
        ("t1", 2, (3, 7)),
        ("t2", 0, None),
        ("t3", 2, None),
        ("t4", 0, ()),
    ]
    jl = tmp_path / "h.jsonl"
    jl.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"trace_id": "t1", "annotator": "a", "steps": [5, 2, 5]},
                {"trace_id": "t2", "annotator": "a", "count": 3},
            ]
        )
        + "\n"
    )
    got = load_human_annotations(jl)
    assert [(a.count, a.steps) for a in got] == [(2, (2, 5)), (3, None)]


@pytest.mark.parametrize(
    "rows, match",
    [
        ([{"trace_id": "t", "annotator": "a", "steps": [1], "count": 2}], "disagrees"),
        ([{"trace_id": "t", "annotator": "a", "count": 1}] * 2, "duplicate"),
        ([{"trace_id": "t", "annotator": "a"}], "either steps"),
        ([{"trace_id": "", "annotator": "a", "count": 1}], "required"),
    ],
)
def test_load_rejects_bad_rows(tmp_path: Path, rows: list[dict[str, object]], match: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=match):
        load_human_annotations(p)


# ------------------------------------------------------------------------- `legival judge-agreement`


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "j.duckdb"
    with Store(path) as s:
        ingest_file(s, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
    return path


def legival(*args: str, check: bool = True) -> Ran:
    p = run_legival(*args)
    if check and p.returncode != 0:
        raise AssertionError(f"legival {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def last_json(p: Ran) -> dict[str, Any]:
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_judge_agreement_against_hand_computed_values(db: Path, tmp_path: Path) -> None:
    with Store(db) as st:
        t = [r[0] for r in q(st, "SELECT trace_id FROM traces ORDER BY trace_id LIMIT 5")]
        judge_counts = {t[0]: [], t[1]: [2], t[2]: [1, 4], t[3]: [3, 5, 7]}
        st.insert_rows("judge_results", [
            {"trace_id": tid, "judge_key": "k" * 32, "judge": "gemini", "model": "g", "prompt_version": "v",
             "status": "ok", "m": 10, "flagged_steps": json.dumps(fl), "fraction": len(fl) / 10}
            for tid, fl in judge_counts.items()
        ] + [{"trace_id": t[4], "judge_key": "k" * 32, "judge": "gemini", "model": "g", "prompt_version": "v",
              "status": "failed", "m": 10, "flagged_steps": "[]", "fraction": None}])
    human = tmp_path / "human.csv"
    with human.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trace_id", "annotator", "steps", "count"])
        # annotator A by steps: counts 0, 1, 3, 2; annotator B by counts: 0, 0, 2, 3
        for tid, steps in zip(t[:4], ["", "2", "1;2;3", "4;6"], strict=True):
            w.writerow([tid, "A", steps, ""])
        for tid, c in zip(t[:4], [0, 0, 2, 3], strict=True):
            w.writerow([tid, "B", "", c])
        w.writerow([t[4], "A", "1", ""])  # the judge failed on it: left out
        w.writerow(["not-in-store", "A", "1", ""])
    s = last_json(legival("judge-agreement", "--human", str(human), "--db", str(db)))
    assert s["judge_key"] == "k" * 32 and s["n_traces"] == 4
    assert (s["skipped_no_judge"], s["skipped_no_dataset"]) == (1, 1)
    (ds,) = s["per_dataset"]
    assert ds["dataset"] == "gsm8k" and ds["n_traces"] == 4
    a_j, b_j = ds["human_vs_judge"]
    (a_b,) = ds["human_vs_human"]
    # hand-computed: judge 0,1,2,3; A 0,1,3,2; B 0,0,2,3
    assert (a_j["a"], a_j["b"], a_j["n"]) == ("A", "judge", 4)
    assert a_j["spearman"] == pytest.approx(0.8)  # 1 - 6*2 / (4*15)
    assert a_j["kappa_counts"] == pytest.approx(1 / 3)  # po 0.5, pe 0.25
    assert a_j["kappa_binary"] == pytest.approx(1.0)
    assert b_j["spearman"] == pytest.approx(3 / math.sqrt(10))  # Pearson on tied ranks 1.5,1.5,3,4
    assert b_j["kappa_counts"] == pytest.approx(2 / 3)  # po 0.75, pe 0.25
    assert b_j["kappa_binary"] == pytest.approx(0.5)  # po 0.75, pe 0.5
    assert a_b["spearman"] == pytest.approx(3.5 / math.sqrt(22.5))
    assert a_b["kappa_counts"] == pytest.approx(0.0)
    assert a_b["kappa_binary"] == pytest.approx(0.5)
    # Beside kappa (issue 48): the flag A>0 = judge>0 = F,T,T,T: raw 1, AC1 1; 3 of 4 flagged: saturated.
    assert a_j["flag"]["raw"] == 1.0 and a_j["flag"]["gwet"] == pytest.approx(1.0) and a_j["flag"]["saturated"]
    assert a_j["flag"]["prevalence_a"] == [0.25, 0.75]
    # Bins 0/1/2/3+ (ordinal, quadratic weights 1 - d^2/9): A 0,1,3,2 vs judge 0,1,2,3: pa = (1 + 1 + 8/9 + 8/9)/4
    # = 17/18; every margin 1/4: T_w = 4 + 6*8/9 + 4*5/9 = 104/9, pe (AC2) = T_w/12 * sum pi(1-pi) = 26/27 * 3/4
    # = 13/18 = pe (weighted kappa) = T_w/16 -> both (17/18 - 13/18) / (5/18) = 0.8.
    assert a_j["binned"]["kappa"] == pytest.approx(0.8) and a_j["binned"]["gwet"] == pytest.approx(0.8)
    assert a_j["binned"]["ordinal"] and a_j["binned"]["categories"] == [0, 1, 2, 3]
    # Per step, 4 traces x m = 10 steps: A {}, {2}, {1,2,3}, {4,6} vs judge {}, {2}, {1,4}, {3,5,7}: 8 steps
    # disagree (t2: 2, 3, 4; t3: 3..7) -> raw 32/40 = 0.8; each side flags 6 of 40 (0.15): pe = 0.85^2 + 0.15^2
    # = 0.745, kappa = 0.055/0.255 = 11/51; AC1 pe = 2 * 0.15 * 0.85 = 0.255, AC1 = 0.545/0.745 = 109/149.
    st = a_j["steps"]
    assert (st["n"], st["raw"], st["saturated"]) == (40, pytest.approx(0.8), True) and a_j["steps_outside"] == 0
    assert st["kappa"] == pytest.approx(11 / 51) and st["gwet"] == pytest.approx(109 / 149)
    assert b_j["steps"]["n"] == 0 and b_j["steps"]["kappa"] is None  # B gave counts only
    # mean human 0, .5, 2.5, 2.5 vs judge 0..3: 5 concordant pairs, one tie in x -> 5 / sqrt(5*6)
    assert s["kendall_tau_mean_human_vs_judge"] == pytest.approx(5 / math.sqrt(30))
    p = legival("judge-agreement", "--human", str(human), "--db", str(db), "--judge-key", "nope", check=False)
    assert p.returncode == 2 and "error:" in p.stderr
