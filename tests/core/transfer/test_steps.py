"""Step events on hand-made depths (issue 41, docs/step_events.md): every outcome, each feature's definition,
the nulls, and the drops equal to the regression rate's count."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pytest

from legival_core.transfer.step_events import (
    SELF_CHECK_PATTERN,
    gold_forms,
    segment_events,
    self_check_flags,
    stated,
)
from legival_core.transfer.utility import transfer_table


def _depths(rows: Sequence[tuple[int, str, int, float | None, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"tix": pl.Int64, "student_key": pl.Utf8, "k": pl.Int64, "y": pl.Float64,
                                      "prompt_tokens": pl.Int64}, orient="row")


def _steps(m: int, tix: int = 0, flagged: tuple[int, ...] = (), cos: dict[int, float] | None = None,
           cues: tuple[int, ...] = ()) -> pl.DataFrame:
    cos = cos or {}
    return pl.DataFrame({"tix": [tix] * m, "idx": list(range(1, m + 1)),
                         "backtracking": [i in flagged for i in range(1, m + 1)],
                         "max_cos": [cos.get(i) for i in range(1, m + 1)],
                         "self_check": [i in cues for i in range(1, m + 1)]},
                        schema={"tix": pl.Int64, "idx": pl.Int64, "backtracking": pl.Boolean, "max_cos": pl.Float64,
                                "self_check": pl.Boolean})


def _traces(m: int, method: str | None = "lexical", sim: bool = True, defined: bool = True,
            first: int | None = None, tix: int = 0, trace_id: str = "t") -> pl.DataFrame:
    return pl.DataFrame({"tix": [tix], "trace_id": [trace_id], "m": [m], "backtracking_method": [method],
                         "has_similarity": [sim], "answer_defined": [defined], "answer_first": [first]},
                        schema={"tix": pl.Int64, "trace_id": pl.Utf8, "m": pl.Int64, "backtracking_method": pl.Utf8,
                                "has_similarity": pl.Boolean, "answer_defined": pl.Boolean, "answer_first": pl.Int64})


M = 10
DEPTHS = _depths([(0, "s", 0, 1.0, 100), (0, "s", 3, 0.0, 130), (0, "s", 6, 0.0, 160), (0, "s", 9, 1.0, None),
                  (0, "s", 10, 1.0, 200)])


def test_every_outcome_and_the_segment_geometry() -> None:
    ev = segment_events(DEPTHS, _steps(M), _traces(M))
    assert ev["outcome"].to_list() == ["drop", "flat_wrong", "rise", "flat_correct"]
    assert list(zip(ev["k_start"], ev["k_end"], strict=True)) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert ev["n_steps"].to_list() == [3, 3, 3, 1]
    assert ev["position"].to_list() == [0.3, 0.6, 0.9, 1.0]
    assert ev["y_start"].to_list() == [1.0, 0.0, 0.0, 1.0] and ev["y_end"].to_list() == [0.0, 0.0, 1.0, 1.0]
    # the student's own prompt tokens at k_end minus at k_start; null when either is not counted
    assert ev["tokens_added"].to_list() == [30, 30, None, None]
    assert set(ev["trace_id"]) == {"t"} and set(ev["student_key"]) == {"s"} and set(ev["m"]) == {M}


def test_a_flat_segment_at_one_half_is_correct_and_below_is_wrong() -> None:
    d = _depths([(0, "s", 0, 0.5, None), (0, "s", 3, 0.5, None), (0, "s", 4, 0.25, None), (0, "s", 5, 0.25, None)])
    assert segment_events(d, _steps(5), _traces(5))["outcome"].to_list() == ["flat_correct", "drop", "flat_wrong"]


def test_an_unobserved_depth_is_skipped_and_a_lone_depth_makes_no_event() -> None:
    d = _depths([(0, "s", 0, 1.0, None), (0, "s", 3, None, None), (0, "s", 6, 0.0, None),  # k=3 all overflowed
                 (0, "lone", 0, 1.0, None), (0, "lone", 3, None, None)])
    ev = segment_events(d, _steps(6), _traces(6))
    assert ev.select("student_key", "k_start", "k_end", "outcome").rows() == [("s", 0, 6, "drop")]


def test_backtracking_is_a_flagged_step_inside_the_segment_and_null_without_a_method() -> None:
    ev = segment_events(DEPTHS, _steps(M, flagged=(3, 7)), _traces(M))
    # (0,3] holds step 3, (3,6] holds 4..6, (6,9] holds 7, (9,10] holds 10: k_start is outside its segment
    assert ev["backtracking"].to_list() == [True, False, True, False]
    assert ev["backtracking_method"].to_list() == ["lexical"] * 4
    none = segment_events(DEPTHS, _steps(M, flagged=(3,)), _traces(M, method=None))
    assert none["backtracking"].to_list() == [None] * 4 and none["backtracking_method"].to_list() == [None] * 4


def test_max_cos_is_the_segment_maximum_and_null_where_no_step_has_one() -> None:
    cos = {i: 0.1 * i for i in range(2, M + 1)}  # r_i exists from step 2 on
    ev = segment_events(DEPTHS, _steps(M, cos=cos), _traces(M))
    assert ev["max_cos"].to_list() == pytest.approx([0.3, 0.6, 0.9, 1.0])
    first = segment_events(_depths([(0, "s", 0, 1.0, None), (0, "s", 1, 1.0, None), (0, "s", 3, 1.0, None)]),
                           _steps(3, cos=cos), _traces(3))
    assert first["max_cos"].to_list()[0] is None  # (0, 1] holds step 1 only, which has no previous step
    assert first["max_cos"].to_list()[1] == pytest.approx(0.3)
    assert segment_events(DEPTHS, _steps(M, cos=cos), _traces(M, sim=False))["max_cos"].to_list() == [None] * 4


def test_answer_stated_holds_from_the_first_stating_step_on_and_is_null_when_undefined() -> None:
    ev = segment_events(DEPTHS, _steps(M), _traces(M, first=5))
    assert ev["answer_stated"].to_list() == [False, True, True, True]  # the prefix up to k_end holds step 5
    never = segment_events(DEPTHS, _steps(M), _traces(M, first=None))
    assert never["answer_stated"].to_list() == [False] * 4
    undefined = segment_events(DEPTHS, _steps(M), _traces(M, defined=False, first=5))
    assert undefined["answer_stated"].to_list() == [None] * 4


def test_self_check_is_a_cue_in_one_of_the_segments_steps() -> None:
    assert segment_events(DEPTHS, _steps(M, cues=(4, 10)), _traces(M))["self_check"].to_list() == [
        False, True, False, True]


def test_students_and_traces_stay_apart() -> None:
    d = pl.concat([DEPTHS, DEPTHS.with_columns(pl.lit("b").alias("student_key")),
                   _depths([(1, "s", 0, 0.0, None), (1, "s", 2, 1.0, None)])])
    steps = pl.concat([_steps(M, flagged=(2,)), _steps(2, tix=1, flagged=(1,))])
    traces = pl.concat([_traces(M), _traces(2, tix=1, trace_id="u")])
    ev = segment_events(d, steps, traces)
    assert ev.group_by("trace_id", "student_key").len().sort("trace_id", "student_key").rows() == [
        ("t", "b", 4), ("t", "s", 4), ("u", "s", 1)]
    assert ev.filter(pl.col("trace_id") == "u").select("outcome", "backtracking", "position").rows() == [
        ("rise", True, 1.0)]


def test_bad_depths_are_refused() -> None:
    with pytest.raises(ValueError, match="0 <= k <= m"):
        segment_events(_depths([(0, "s", 0, 1.0, None), (0, "s", 11, 1.0, None)]), _steps(M), _traces(M))
    with pytest.raises(ValueError, match="must be in `traces`"):
        segment_events(_depths([(5, "s", 0, 1.0, None), (5, "s", 1, 1.0, None)]), _steps(M), _traces(M))


def test_drops_are_the_regressions_the_regression_rate_counts() -> None:
    rng = np.random.default_rng(3)
    rows, traces = [], []
    for t in range(60):
        m = int(rng.integers(1, 20))
        traces.append((t, f"t{t}", m))
        for s in ("a", "b"):
            for k in (*range(0, m, 3), m):
                y = None if rng.random() < 0.1 and 0 < k < m else float(rng.integers(0, 3)) / 2
                rows.append((t, s, k, y, None))
    d = _depths(rows)
    tr = pl.DataFrame(traces, schema={"tix": pl.Int64, "trace_id": pl.Utf8, "m": pl.Int64}, orient="row").with_columns(
        pl.lit(None, pl.Utf8).alias("backtracking_method"), pl.lit(False).alias("has_similarity"),
        pl.lit(False).alias("answer_defined"), pl.lit(None, pl.Int64).alias("answer_first"))
    ev = segment_events(d, _steps(0), tr)
    drops = ev.filter(pl.col("outcome") == "drop").group_by("trace_id", "student_key").len()
    six = d.with_columns((pl.col("student_key") == "b").cast(pl.Int64).alias("six")).join(
        tr.select("tix", "m"), on="tix")
    pairs = transfer_table(six, 50).pairs.join(tr.select("tix", "trace_id"), on="tix").with_columns(
        pl.when(pl.col("six") == 1).then(pl.lit("b")).otherwise(pl.lit("a")).alias("student_key"))
    got = pairs.join(drops, on=["trace_id", "student_key"], how="left").with_columns(pl.col("len").fill_null(0))
    assert got.filter(pl.col("has_curve")).height > 40
    assert (got.filter(pl.col("has_curve"))["rr_count"] == got.filter(pl.col("has_curve"))["len"]).all()


# ------------------------------------------------------------------------------- the text features


def test_the_self_check_cues() -> None:
    said = ["Let me double-check: 3*6 = 18.", "We verify that x = 2.", "Make sure the units match.",
            "Plugging x = 2 back in gives 5.", "This confirms the total.", "Let's check the sum.",
            "A quick sanity check: 4 < 5."]
    not_said = ["The check was cashed.", "Then the total is 18.", "Wait, that is wrong.", "Unconfirmed rumours."]
    flags = self_check_flags(pl.Series(said + not_said))
    assert flags.tolist() == [True] * len(said) + [False] * len(not_said)
    import re

    assert [bool(re.search(SELF_CHECK_PATTERN, s)) for s in said + not_said] == flags.tolist()  # one regex, both engines


def test_gold_forms() -> None:
    assert set(gold_forms("1800")) == {"1800", "1,800"}
    assert set(gold_forms(" 18 ")) == {"18"}
    assert {"\\frac{1}{2}", "\\dfrac{1}{2}", "\\tfrac{1}{2}"} <= set(gold_forms("\\dfrac{1}{2}"))
    assert "\\frac{1}{2}" in gold_forms("0.5") and gold_forms("") == ()


def _first(steps: list[list[str]], datasets: list[str], golds: list[str | None]) -> tuple[list[bool], list[int]]:
    text = pl.Series([s for trace in steps for s in trace], dtype=pl.Utf8)
    row = np.repeat(np.arange(len(steps)), [len(t) for t in steps])
    idx = np.concatenate([np.arange(1, len(t) + 1) for t in steps])
    defined, first = stated(text, row, idx, datasets, golds)
    return defined.tolist(), first.tolist()


def test_the_answer_is_stated_where_the_grader_reads_the_gold_in_one_step() -> None:
    gsm = ["We have 18 apples and 230 pears.", "So the total is 23.", "Thus 23 it is."]
    big = ["First 900 + 900.", "That is 1,800 dollars."]
    math = ["So x = 1/2 here.", "Hence $\\boxed{\\dfrac{1}{2}}$.", "Done."]
    gpqa = ["Option C is wrong.", "The correct answer is (C).", "C."]
    defined, first = _first([gsm, big, math, gpqa], ["gsm8k", "gsm8k", "math", "gpqa"], ["23", "1800", "\\frac{1}{2}", "C"])
    assert defined == [True] * 4
    # gsm8k: step 1's numbers (18, 230) are not 23, step 2's last number is; math: only a box or an
    # answer phrase counts; gpqa: a stated letter ("the correct answer is (C)"), not a mention
    assert first == [2, 2, 2, 2]
    # a gold number inside a longer one, or a step whose own answer is another number, is not stated
    assert _first([["We get 230.", "23 + 1 = 24."]], ["gsm8k"], ["23"])[1] == [0]


def test_answer_stated_is_undefined_without_a_cheap_grader_or_a_one_expression_gold() -> None:
    groups = ('[["BASS","CARP","PIKE","SOLE"],["BALL","BAT","NET","PUCK"],["ASH","ELM","FIR","OAK"],'
              '["JAZZ","POP","RAP","SKA"]]')
    defined, first = _first([["The answer is 3."], ["x"], ["y"]], ["connections", "no-such-dataset", "gsm8k"],
                            [groups, "3", None])
    assert defined == [False, False, False] and first == [0, 0, 0]
