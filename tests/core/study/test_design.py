"""The study design (legival_core/study/design.py): balance, no repeated problem, the SPEC's depth grid,
attention checks that state the answer, determinism. Candidates are built as frames, no store."""

from __future__ import annotations

import math
from collections import Counter

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legival_core.study.design import (
    DesignError,
    StudyConfig,
    cell_order,
    design_study,
    grid,
    nearest_depth,
)
from legival_core.transfer.depths import rollout_depths

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def candidates(teachers: int, problems: int, m: int = 12, stating_every: int = 2, shared: bool = True) -> pl.DataFrame:
    rows = []
    for t in range(teachers):
        for i in range(problems):
            pid = f"p{i:03d}" if shared else f"t{t}p{i:03d}"
            rows.append({"trace_id": f"T{t}|{pid}", "teacher": f"T{t}", "dataset": "gsm8k", "problem_id": pid,
                         "m": m + (i % 3), "answer_first": (m - 1 - i % 4) if i % stating_every == 0 else None})
    return pl.DataFrame(rows, schema={"trace_id": pl.Utf8, "teacher": pl.Utf8, "dataset": pl.Utf8,
                                      "problem_id": pl.Utf8, "m": pl.Int64, "answer_first": pl.Int64})


def config(teachers: int = 3, depths: tuple[float, ...] = FRACTIONS, problems: int = 12, per_participant: int = 12,
           participants: int = 24, attention: int = 2, seed: int = 0, step_interval: int = 3) -> StudyConfig:
    return StudyConfig("s", tuple(f"T{t}" for t in range(teachers)), problems, depths, per_participant, participants,
                       attention, seed, 1.5, step_interval, "spec")


def test_each_participant_sees_every_cell_once_and_every_item_is_answered_equally() -> None:
    cfg = config(attention=0)
    d = design_study(candidates(3, 20), cfg)
    items = {i.item_id: i for i in d.items}
    assert len(d.items) == 3 * 4 * 12
    for a in d.assignments:
        cells = Counter((items[i].teacher, items[i].fraction) for i in a.items)
        assert len(cells) == 12 and set(cells.values()) == {1}
    assert set(d.answers_per_item().values()) == {2}  # 24 participants x 12 cells over 12 items a cell
    s = d.summary()
    assert s["answers_needed"] == 24 * 12 and s["participant_minutes"] == 24 * 12 * 1.5
    assert s["answers_per_item"] == {"min": 2, "max": 2} and s["cells"] == 12


@pytest.mark.parametrize(("teachers", "depths", "per", "people"), [(5, (0.5, 1.0), 4, 4), (3, FRACTIONS, 5, 7),
                                                                (2, (0.5, 1.0), 3, 5), (4, (0.25, 0.75, 1.0), 7, 9)])
def test_every_cell_is_answered_about_equally_often_when_participants_see_a_few_cells(
        teachers: int, depths: tuple[float, ...], per: int, people: int) -> None:
    """Participants' blocks of cells follow one another round the cycle: with fewer items per participant
    than cells, every (teacher, depth) cell still gets its share of answers (within one)."""
    cfg = config(teachers=teachers, depths=depths, problems=12, per_participant=per, participants=people, attention=0)
    d = design_study(candidates(teachers, 20), cfg)
    items = {i.item_id: i for i in d.items}
    answered = Counter((items[i].teacher, items[i].fraction) for a in d.assignments for i in a.items)
    cells = teachers * len(depths)
    counts = [answered.get((f"T{t}", f), 0) for t in range(teachers) for f in depths]
    assert sum(counts) == per * people and max(counts) - min(counts) <= 1, counts
    assert min(counts) == (per * people) // cells


def test_teachers_share_the_same_problems_when_they_can() -> None:
    d = design_study(candidates(3, 20), config(attention=0))
    per_teacher = {t: {i.problem_id for i in d.items if i.teacher == t} for t in ("T0", "T1", "T2")}
    assert per_teacher["T0"] == per_teacher["T1"] == per_teacher["T2"] and len(per_teacher["T0"]) == 12


def test_the_cell_order_is_a_latin_cycle() -> None:
    for t, dd in ((3, 4), (2, 4), (4, 4), (1, 3), (5, 1)):
        order = cell_order(t, dd)
        assert sorted(order) == [(a, b) for a in range(t) for b in range(dd)]
        if t > 1 and dd > 1:  # both turn at every step
            assert all(order[i][0] != order[i + 1][0] and order[i][1] != order[i + 1][1] for i in range(len(order) - 1))


def test_depths_are_the_nearest_grid_depth_ties_to_the_smaller() -> None:
    assert rollout_depths(10, 3) == (0, 3, 6, 9, 10)
    assert nearest_depth(0.75, 10, grid(10, 3, "spec")) == 6  # 7.5: 6 and 9 tie
    assert nearest_depth(0.25, 10, grid(10, 3, "spec")) == 3
    assert nearest_depth(1.0, 10, grid(10, 3, "preprint")) == 9  # the preprint never shows k = m
    assert nearest_depth(0.3, 10, (0, 3, 6)) == 3  # 0.3 * 10 is 3 exactly, not 3.0000000000000004
    assert nearest_depth(0.5, 3, grid(3, 3, "spec")) == 3  # 1.5: 0 and 3 tie, but 0 shows no prefix


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 40), s=st.integers(1, 6), tenths=st.integers(1, 10), profile=st.sampled_from(["spec", "preprint"]))
def test_a_fraction_above_zero_never_takes_depth_zero(m: int, s: int, tenths: int, profile: str) -> None:
    """docs/study.md: a study never shows k = 0 for a fraction > 0; the nearest depth among k >= 1."""
    f, depths = tenths / 10, grid(m, s, profile)
    k = nearest_depth(f, m, depths)
    positive = [d for d in depths if d >= 1]
    assert k >= 1 or not positive
    if positive:
        assert k == min(positive, key=lambda d: (abs(d - f * m), d))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 8), s=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_every_item_of_a_short_trace_has_a_prefix(m: int, s: int, seed: int) -> None:
    """Short traces, where 0 and a positive depth tie (f = 0.5, m = 3, s = 3): each item shows k >= 1."""
    cand = candidates(2, 12, m=m)
    try:
        d = design_study(cand, config(2, (0.5, 1.0), 4, 4, 4, 0, seed, step_interval=s))
    except DesignError:
        return
    assert all(i.k >= 1 for i in d.items if i.kind == "item") and d.version == "3"


def test_a_short_cell_is_named() -> None:
    cand = candidates(3, 20).filter(~((pl.col("teacher") == "T1") & (pl.col("problem_id") >= "p010")))
    with pytest.raises(DesignError, match=r"--problems: .*teacher T1 has 10 eligible.*T1 x 0\.25") as e:
        design_study(cand, config())
    assert e.value.option == "--problems"


def test_too_many_items_per_participant_for_the_problems() -> None:
    with pytest.raises(DesignError, match="--per-participant: 13 items per participant.*12 distinct problems"):
        design_study(candidates(3, 20), config(per_participant=13))


def test_no_attention_check_without_a_trace_stating_its_answer() -> None:
    cand = candidates(3, 20).with_columns(pl.lit(None, pl.Int64).alias("answer_first"))
    with pytest.raises(DesignError, match="--attention: no transfer trace"):
        design_study(cand, config())
    assert design_study(cand, config(attention=0)).summary()["attention_items"] == 0


def test_attention_checks_show_a_prefix_that_states_the_answer() -> None:
    cand = candidates(3, 20)
    d = design_study(cand, config())
    first = dict(zip(cand["trace_id"], cand["answer_first"], strict=True))
    checks = [i for i in d.items if i.kind == "attention"]
    assert checks
    for c in checks:
        k_grid = grid(c.m, 3, "spec")
        assert c.k in k_grid and c.k >= first[c.trace_id]
        assert all(k < first[c.trace_id] for k in k_grid if k < c.k)  # the first such depth
    kinds = {i.item_id: i.kind for i in d.items}
    for a in d.assignments:
        assert Counter(kinds[i] for i in a.items) == {"item": 12, "attention": 2}
    positions = {a.items.index(i) for a in d.assignments for i in a.items if kinds[i] == "attention"}
    assert len(positions) > 2  # placed at random positions, not always the same


def test_the_same_seed_gives_the_same_design_and_another_seed_another() -> None:
    cand = candidates(3, 20)
    assert design_study(cand, config(seed=7)) == design_study(cand.reverse(), config(seed=7))
    assert design_study(cand, config(seed=7)).assignments != design_study(cand, config(seed=8)).assignments


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_teachers=st.integers(1, 4), n_depths=st.integers(1, 4), problems=st.integers(1, 9),
       per=st.integers(1, 14), participants=st.integers(1, 12), attention=st.integers(0, 2),
       shared=st.booleans(), seed=st.integers(0, 2**31))
def test_design_properties_over_sizes_and_seeds(n_teachers: int, n_depths: int, problems: int, per: int,
                                                participants: int, attention: int, shared: bool, seed: int) -> None:
    fractions = FRACTIONS[4 - n_depths:]
    cand = candidates(n_teachers, 12, m=14, shared=shared)
    cfg = config(n_teachers, fractions, problems, per, participants, attention, seed)
    try:
        d = design_study(cand, cfg)
    except DesignError as e:
        assert e.option in ("--per-participant", "--attention")
        if e.option == "--per-participant":
            assert per > problems or "cannot see" in str(e)
        return
    items = {i.item_id: i for i in d.items}
    n_cells = n_teachers * n_depths
    for a in d.assignments:
        its = [items[i] for i in a.items]
        assert len(its) == per + attention
        assert len({(i.dataset, i.problem_id) for i in its}) == len(its)  # never a problem twice
        real = [i for i in its if i.kind == "item"]
        teach = Counter(i.teacher for i in real)
        depth = Counter(i.fraction for i in real)
        if per % n_cells == 0:
            assert set(Counter((i.teacher, i.fraction) for i in real).values()) == {per // n_cells}
        assert max(teach.values()) - min(teach.values() if len(teach) == n_teachers else [0]) <= 1
        spread = 1 if math.gcd(n_teachers, n_depths) == 1 else 2
        assert max(depth.values()) - min(depth.values() if len(depth) == n_depths else [0]) <= spread
    for it in d.items:
        k_grid = grid(it.m, 3, "spec")
        assert it.k in k_grid
        if it.kind == "item":
            shown = [k for k in k_grid if k >= 1]
            assert it.k == min(shown, key=lambda k: (abs(k - it.fraction * it.m), k))  # type: ignore[operator]
    assert design_study(cand, cfg) == d
