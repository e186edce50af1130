"""Step effects (issue 41): risk difference and odds ratio against a hand computation, the permutation
p-value against scipy's exact test, and a planted effect recovered from a store of the real schema
(built here through the store API, its events computed by the step_events stage)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.reports.compute.data import ReportConfig
from legival_core.reports.compute.step_effects import (
    ALL,
    FEATURES,
    LOGIT_TERMS,
    NO_R_I,
    OUTCOMES,
    odds_ratio,
    permutation_p,
    risk_difference,
    step_analysis,
    step_effects,
)
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.base import run_stage
from legival_core.stages.step_events import StepEventsStage
from legival_core.store import Store
from legival_core.store import step_events as step_rows
from legival_core.transfer.utility import bins_of
from legival_core.types import canonical_json

CONFIG = ReportConfig(resamples=1000, seed=0)


def _events(cells: dict[str, tuple[int, int, int, int]], feature: str = "backtracking") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Hand-made drop-risk events of one student: per teacher (exposed & drop, exposed & none,
    unexposed & drop, unexposed & none), one problem per event; the other features null or false."""
    rows, traces = [], []
    n = 0
    for teacher, (a, b, c, d) in cells.items():
        for exposed, drop, count in ((True, True, a), (True, False, b), (False, True, c), (False, False, d)):
            for _ in range(count):
                tid = f"{teacher}-{n}"
                rows.append({"trace_id": tid, "student_key": "s", "k_start": 0, "k_end": 3, "m": 6,
                             "outcome": "drop" if drop else "flat_correct", "y_start": 1.0, "y_end": 0.0 if drop else 1.0,
                             "n_steps": 3, "tokens_added": None, "position": 0.5, "backtracking": None,
                             "backtracking_method": None, "max_cos": None, "answer_stated": None, "self_check": False,
                             feature: exposed})
                traces.append({"trace_id": tid, "teacher": teacher, "dataset": "gsm8k", "problem_id": f"p{n}"})
                n += 1
    schema = {"tokens_added": pl.Int32, "max_cos": pl.Float64, "backtracking": pl.Boolean, "answer_stated": pl.Boolean,
              "backtracking_method": pl.Utf8}
    return pl.DataFrame(rows, schema_overrides=schema), pl.DataFrame(traces)


def test_risk_difference_and_odds_ratio_are_the_hand_computation() -> None:
    # exposed: 12 drops in 20; unexposed: 4 in 20 -> RD = 0.6 - 0.2, OR = (12 * 16) / (8 * 4) = 6
    events, traces = _events({"t": (12, 8, 4, 16)})
    row = step_effects(events, traces, CONFIG).filter(
        (pl.col("scope") == "t") & (pl.col("feature") == "backtracking") & (pl.col("outcome") == "drop")).row(0, named=True)
    assert row["status"] == "computed"
    assert (row["n_events"], row["n_exposed"], row["n_unexposed"], row["events_exposed"], row["events_unexposed"]) == (
        16, 20, 20, 12, 4)
    assert row["p_exposed"] == pytest.approx(0.6) and row["p_unexposed"] == pytest.approx(0.2)
    assert row["risk_difference"] == pytest.approx(0.4) and row["odds_ratio"] == pytest.approx(6.0)
    assert row["or_haldane"] is False and row["n_problems"] == 40
    assert row["rd_ci_low"] < 0.4 < row["rd_ci_high"] and row["or_ci_low"] < 6.0 < row["or_ci_high"]
    # a zero cell: 0.5 added to every cell, and said so
    assert odds_ratio(10, 0, 2, 8) == pytest.approx((10.5 * 8.5) / (0.5 * 2.5))
    zero = step_effects(*_events({"t": (10, 0, 2, 8)}), CONFIG).filter(
        (pl.col("scope") == "t") & (pl.col("feature") == "backtracking") & (pl.col("outcome") == "drop")).row(0, named=True)
    assert zero["or_haldane"] is True and zero["odds_ratio"] == pytest.approx(71.4)
    assert risk_difference(10, 0, 2, 8) == pytest.approx(0.8)
    assert math.isnan(risk_difference(0, 0, 1, 1)) and math.isnan(odds_ratio(0, 0, 1, 1))


@pytest.mark.parametrize("table", [(12, 8, 4, 16), (3, 17, 9, 11), (1, 30, 7, 12), (25, 5, 20, 10)])
def test_the_permutation_p_value_is_fishers_exact_test_within_monte_carlo_error(table: tuple[int, int, int, int]) -> None:
    from scipy.stats import fisher_exact

    n_perm = 20_000
    exact = fisher_exact([[table[0], table[1]], [table[2], table[3]]]).pvalue
    got = permutation_p(*table, n_permutations=n_perm, rng=np.random.default_rng(1))
    error = math.sqrt(exact * (1 - exact) / n_perm)
    assert abs(got - exact) <= 4 * error + 1 / n_perm, (got, exact)


def test_the_hypergeometric_draw_is_the_permutation_of_the_feature() -> None:
    """The permuted count of exposed events has the law of the literal permutation of the labels."""
    from scipy.stats import fisher_exact

    a, b, c, d = 7, 5, 3, 11
    labels = np.array([1] * (a + b) + [0] * (c + d))
    events = np.array([1] * a + [0] * b + [1] * c + [0] * d)
    rng = np.random.default_rng(2)
    literal = np.array([int((rng.permutation(labels) * events).sum()) for _ in range(4000)])
    exact = fisher_exact([[a, b], [c, d]]).pvalue
    from scipy.stats import hypergeom

    law = hypergeom(a + b + c + d, a + c, a + b)
    literal_p = (1 + (law.logpmf(literal) <= law.logpmf(a) + 1e-7).sum()) / 4001
    assert abs(literal_p - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000) + 1 / 4000
    assert abs(literal.mean() - law.mean()) < 0.1


def test_one_schema_whatever_ran() -> None:
    events, traces = _events({"t": (12, 8, 4, 16)})
    nothing = step_analysis(events.clear(), traces, CONFIG)
    assert nothing.effects.height == 2 * len(FEATURES) * len(OUTCOMES)  # scopes t and all
    assert set(nothing.effects["status"]) == {"not run: legival step-events --db DB"}
    ran = step_analysis(events, traces, CONFIG)
    assert ran.effects.columns == nothing.effects.columns and ran.effects.height == nothing.effects.height
    assert ran.logistic.columns == nothing.logistic.columns
    assert ran.logistic.height == nothing.logistic.height == 2 * len(OUTCOMES) * len(LOGIT_TERMS)
    assert ran.agreement.columns == nothing.agreement.columns
    status = dict(ran.effects.filter((pl.col("scope") == ALL) & (pl.col("outcome") == "drop"))
                  .select("feature", "status").iter_rows())
    assert status["redundant"] == "not run: legival efficiency --db DB"  # max_cos null: no similarity rows
    assert status["answer_stated"].startswith("unavailable") and status["long"].startswith("unavailable")
    assert status["self_check"] == "too few events: no exposed segment"
    idle = pl.concat([traces, pl.DataFrame({"trace_id": ["u-0"], "teacher": ["u"], "dataset": ["gsm8k"],
                                            "problem_id": ["p0"]})])
    other = step_analysis(events, idle, CONFIG)  # a teacher without segments
    assert set(other.effects.filter(pl.col("scope") == "u")["status"]) == {"too few events: no segment"}
    assert set(other.logistic.filter(pl.col("scope") == "u")["status"]) == {"too few events: no segment"}
    # the events were computed with the traces' r_i stored (`similarity`), but no segment holds a step
    # with an r_i: not "not run"
    measured = events.with_columns(pl.lit(True).alias("similarity"))
    why = dict(step_analysis(measured, traces, CONFIG).effects.filter(
        (pl.col("scope") == ALL) & (pl.col("feature") == "redundant")).select("outcome", "status").iter_rows())
    assert why == {"drop": NO_R_I, "rise": "too few events: no segment"}  # every y_start is 1: none can rise
    terms = step_analysis(measured, traces, CONFIG).logistic.filter(pl.col("term") == "max_cos")["status"].to_list()
    assert set(terms) <= {"not in the model: " + NO_R_I, "too few events: no segment"} and terms
    # a redundancy value in the trace table (r_i of another embedding model, or no r_i row) says nothing:
    # the events say whether their r_i were there
    unmeasured = events.with_columns(pl.lit(False).alias("similarity"))
    with_redundancy = traces.with_columns(pl.lit(0.0).alias("redundancy"))
    assert set(step_effects(unmeasured, with_redundancy, CONFIG).filter(
        (pl.col("feature") == "redundant") & (pl.col("outcome") == "drop"))["status"]) == {
        "not run: legival efficiency --db DB"}
    few = step_effects(*_events({"t": (3, 5, 2, 9)}), CONFIG)
    assert few.filter(pl.col("feature") == "backtracking")["status"].to_list()[0] == "too few events: 5 (fewer than 10)"
    assert few["risk_difference"].null_count() == few.height  # no estimate where the status says why


def _collinear(n: int = 400, seed: int = 3) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Drop-risk events where every step adds 20 prompt tokens (tokens_added = 20 x n_steps, as in the
    synthetic store), `position` constant, self_check random and drops tied to n_steps."""
    rng = np.random.default_rng(seed)
    n_steps = rng.integers(1, 6, n)
    drop = rng.random(n) < 0.15 + 0.08 * n_steps
    events = pl.DataFrame({
        "trace_id": [f"t-{i}" for i in range(n)], "student_key": "s", "k_start": 0, "k_end": n_steps, "m": 6,
        "outcome": np.where(drop, "drop", "flat_correct"), "y_start": 1.0, "y_end": np.where(drop, 0.0, 1.0),
        "n_steps": n_steps, "tokens_added": 20 * n_steps, "position": 0.5,
        "backtracking": pl.Series([None] * n, dtype=pl.Boolean), "backtracking_method": pl.Series([None] * n, dtype=pl.Utf8),
        "max_cos": pl.Series([None] * n, dtype=pl.Float64), "answer_stated": pl.Series([None] * n, dtype=pl.Boolean),
        "self_check": rng.random(n) < 0.4, "similarity": False})
    traces = pl.DataFrame({"trace_id": events["trace_id"], "teacher": "t", "dataset": "gsm8k",
                           "problem_id": [f"p{i // 2}" for i in range(n)]})
    return events, traces


def test_collinear_features_leave_the_model_with_a_status_and_never_raise() -> None:
    events, traces = _collinear()
    rows = {r["term"]: r for r in step_analysis(events, traces, CONFIG).logistic.filter(
        (pl.col("scope") == ALL) & (pl.col("outcome") == "drop")).iter_rows(named=True)}
    assert rows["n_steps"]["status"] == "not in the model: collinear with tokens_added"
    assert rows["position"]["status"] == "not in the model: constant"
    assert rows["tokens_added"]["status"] == "computed" and rows["tokens_added"]["std_err"] < 1
    assert rows["tokens_added"]["or_ci_low"] > 1  # drops rise with the segment's length: kept, estimated
    assert rows["intercept"]["n_params"] == 3  # intercept, self_check, tokens_added
    assert all(r["status"] for r in rows.values())


def test_an_unidentified_fit_is_a_status_and_exp_never_overflows() -> None:
    from legival_core.reports.compute.step_logit import fit_rows, safe_exp

    assert safe_exp(800.0) is None and safe_exp(float("nan")) is None and safe_exp(0.0) == 1.0
    events, traces = _collinear()
    # near-collinear (not exactly): n_steps plus a tiny noise passes the rank check, the fit's standard
    # errors explode: a status on every row, never an OverflowError
    rng = np.random.default_rng(0)
    near = events.with_columns((pl.col("tokens_added").cast(pl.Float64) + rng.normal(0, 1e-6, events.height))
                               .alias("tokens_added"), pl.Series("_pi", [i // 2 for i in range(events.height)]))
    rows = fit_rows("drop", near, {})
    statuses = {r["term"]: r["status"] for r in rows}
    assert statuses["intercept"].startswith("too few events: the model") or (
        statuses["n_steps"].startswith("not in the model: collinear")), statuses
    assert all(r["odds_ratio"] is None or math.isfinite(r["odds_ratio"]) for r in rows)
    if statuses["intercept"] != "computed":  # no number where the status says the fit is not to be read
        assert all(r["coef"] is None and r["or_ci_high"] is None for r in rows)


def test_students_agree_on_a_segment_when_every_one_drops() -> None:
    base = {"k_start": 0, "k_end": 3, "m": 6, "y_start": 1.0, "n_steps": 3, "position": 0.5, "self_check": False}
    rows = [
        {**base, "trace_id": "x", "student_key": "a", "outcome": "drop"},
        {**base, "trace_id": "x", "student_key": "b", "outcome": "drop"},
        {**base, "trace_id": "y", "student_key": "a", "outcome": "drop"},
        {**base, "trace_id": "y", "student_key": "b", "outcome": "flat_correct"},
        {**base, "trace_id": "z", "student_key": "a", "outcome": "flat_correct"},  # no drop: not counted
        {**base, "trace_id": "z", "student_key": "b", "outcome": "rise"},
        {**base, "trace_id": "w", "student_key": "a", "outcome": "drop"},  # one student: not counted
    ]
    events = pl.DataFrame(rows).with_columns(
        pl.lit(None, pl.Int32).alias("tokens_added"), pl.lit(None, pl.Boolean).alias("backtracking"),
        pl.lit(None, pl.Float64).alias("max_cos"), pl.lit(None, pl.Boolean).alias("answer_stated"),
        pl.lit(0.0).alias("y_end"))
    traces = pl.DataFrame({"trace_id": ["x", "y", "z", "w"], "teacher": ["t"] * 4, "dataset": ["gsm8k"] * 4,
                           "problem_id": ["p1", "p2", "p3", "p4"]})
    agree = step_analysis(events, traces, CONFIG).agreement
    assert agree.filter(pl.col("scope") == ALL).select("n_segments", "n_all_drop", "share_all_drop").row(0) == (2, 1, 0.5)
    # Fleiss and Gwet over the segments two students could drop (y_start > 0): x (2 drops), y (1 of 2), z (none;
    # a rise is no drop); w has one student. pa = (1 + 0 + 1)/3 = 2/3; pi_drop = (1 + 1/2 + 0)/3 = 1/2: Fleiss pe =
    # 1/4 + 1/4 = 1/2, AC1 pe = 2 * 1/2 * 1/2 / (2 - 1) = 1/2 -> both (2/3 - 1/2) / (1/2) = 1/3.
    row = agree.filter(pl.col("scope") == ALL).row(0, named=True)
    assert (row["kappa_status"], row["n_rated"], row["drop_prevalence"], row["saturated"]) == ("computed", 3, 0.5, False)
    assert row["raw_agreement"] == pytest.approx(2 / 3)
    assert row["fleiss_kappa"] == pytest.approx(1 / 3) and row["gwet_ac1"] == pytest.approx(1 / 3)
    assert row["gwet_ac1_ci_low"] <= 1 / 3 <= row["gwet_ac1_ci_high"]


# ---------------------------------------------------------------------------------- the planted truth


def _planted_store(path: Path, problems: int = 150, m: int = 30, step: int = 3, seed: int = 7) -> None:
    """Two teachers on the same gsm8k problems, one student. Every segment of a trace is backtracking
    (a flagged step inside it) with probability 0.3 and holds a self-check cue with probability 0.2,
    independently. A segment starting correct drops with probability 0.6 when it backtracks and 0.1
    otherwise for teacher `planted`; 0.1 always for teacher `plain`. A wrong one rises with 0.5."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    depths = np.array([*range(0, m, step), m])
    trace_rows, step_rows_, metric_rows, roll = [], [], [], []
    for teacher in ("planted", "plain"):
        for p in range(problems):
            tid = f"{teacher}-{p}"
            exposed = rng.random(len(depths) - 1) < 0.3
            cue = rng.random(len(depths) - 1) < 0.2
            flagged = [int(depths[i]) + 2 for i in np.flatnonzero(exposed)]
            checks = {int(depths[i]) + 1 for i in np.flatnonzero(cue)}
            sentences = [("Let me verify this part." if j in checks else f"Wait, step {j} again." if j in flagged
                          else f"Step {j} adds the numbers.") for j in range(1, m + 1)]
            text, spans = "", []
            for sentence in sentences:
                text += " " if text else ""
                spans.append((len(text), len(text) + len(sentence)))
                text += sentence
            trace_rows.append({"trace_id": tid, "teacher": teacher, "dataset": "gsm8k", "problem_id": f"p{p}",
                               "reasoning": text, "answer_text": "\\boxed{7}", "truncated": False})
            step_rows_ += [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": j, "start_char": a, "end_char": b}
                           for j, (a, b) in enumerate(spans, start=1)]
            metric_rows.append({"trace_id": tid, "metric": BACKTRACKING.name, "params": canonical_json({}),
                                "code_version": BACKTRACKING.version, "value": len(flagged) / m, "method": "lexical",
                                "status": "ok", "detail": canonical_json({"steps": flagged})})
            y = [1]
            for i in range(len(depths) - 1):
                if y[-1] == 1:
                    p_drop = 0.6 if (teacher == "planted" and exposed[i]) else 0.1
                    y.append(0 if rng.random() < p_drop else 1)
                else:
                    y.append(1 if rng.random() < 0.5 else 0)
            roll += [{"trace_id": tid, "student_key": "key-s", "k": int(k), "sample": 0, "m": m,
                      "bin": int(bins_of(np.array([k]), np.array([m]), 50)[0]), "status": "ok", "correct": bool(v),
                      "forced": False, "prompt_tokens": 100 + 10 * int(k)} for k, v in zip(depths, y, strict=True)]
    with Store(path) as s, s.transaction():
        s.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": f"p{p}", "question": "q", "gold": "7"}
                                   for p in range(problems)])
        s.insert_arrow("traces", pa.Table.from_pylist(trace_rows))
        s.insert_arrow("steps", pa.Table.from_pylist(step_rows_))
        s.insert_rows("step_counts", [{"trace_id": t["trace_id"], "segmenter": SEGMENTER_VERSION, "m": m}
                                      for t in trace_rows])
        s.insert_arrow("trace_metrics", pa.Table.from_pylist(metric_rows))
        s.insert_rows("students", [{"student_key": "key-s", "name": "s", "model": "s", "decoding": "greedy",
                                    "prompt_version": "1", "profile": "synthetic"}])
        s.insert_arrow("rollouts", pa.Table.from_pylist(roll))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame]:
    path = tmp_path_factory.mktemp("planted") / "planted.duckdb"
    _planted_store(path)
    with Store(path) as s:
        run_stage(StepEventsStage(), s)
        events = step_rows.step_events(s)
        traces = s._query("SELECT trace_id, teacher, dataset, problem_id FROM traces")
    return events, traces


def _row(table: pl.DataFrame, scope: str, feature: str, outcome: str = "drop") -> dict[str, Any]:
    return table.filter((pl.col("scope") == scope) & (pl.col("feature") == feature)
                        & (pl.col("outcome") == outcome)).row(0, named=True)


def test_a_planted_effect_is_recovered_and_an_unplanted_one_is_not(planted: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    events, traces = planted
    assert set(events["backtracking_method"]) == {"lexical"}
    effects = step_effects(events, traces, CONFIG)
    bt = _row(effects, "planted", "backtracking")
    assert bt["status"] == "computed" and bt["n_events"] >= 150
    assert bt["rd_ci_low"] < 0.5 < bt["rd_ci_high"] and bt["rd_ci_low"] > 0  # planted: 0.6 - 0.1
    assert abs(bt["risk_difference"] - 0.5) < 0.08
    assert bt["or_ci_low"] > 1 and bt["p_permutation"] < 0.01
    for scope, feature in (("planted", "self_check"), ("plain", "backtracking"), ("plain", "self_check")):
        none = _row(effects, scope, feature)
        assert none["status"] == "computed" and none["rd_ci_low"] < 0 < none["rd_ci_high"], (scope, feature, none)
        assert none["or_ci_low"] < 1 < none["or_ci_high"]


def test_the_logistic_model_with_every_feature(planted: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    events, traces = planted
    logit = step_analysis(events, traces, CONFIG).logistic
    drop = {r["term"]: r for r in logit.filter((pl.col("scope") == "planted") & (pl.col("outcome") == "drop"))
            .iter_rows(named=True)}
    assert drop["backtracking"]["status"] == "computed" and drop["backtracking"]["or_ci_low"] > 1
    assert drop["backtracking"]["p_value"] < 1e-6
    assert drop["self_check"]["status"] == "computed"
    assert drop["max_cos"]["status"] == "not in the model: not run: legival efficiency --db DB"
    assert drop["n_steps"]["status"] == "not in the model: constant"  # every segment is 3 steps
    assert drop["position"]["unit"].startswith("1 sd = ")
    # the gold 7 is stated by step 7 when it reads "Step 7 adds the numbers." (its last number), never
    # before (nor by "Step 17 ..."): answer_stated from k_end 7 on in those traces
    stated = events.filter(pl.col("answer_stated"))
    assert stated.height > 1000 and stated["k_end"].min() == 9
    assert drop["answer_stated"]["status"] == "computed"
    assert drop["tokens_added"]["status"] == "not in the model: constant"  # 10 tokens a step, 3 steps a segment
    assert drop["intercept"]["n_params"] == 5  # intercept, backtracking, answer_stated, self_check, position
    assert {r["n"] for r in drop.values()} == {drop["intercept"]["n"]}
