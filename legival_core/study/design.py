"""The design of a human study (issue 42, docs/study.md "Design"): which (trace, depth) items people see,
and who sees which, in what order. Pure and deterministic from the seed: the same candidates and
config give the same design, byte for byte, so a design can be rebuilt and checked.

- Items. Each chosen teacher gets `problems` transfer traces (one per problem); each is shown at every
  asked fraction f, at the grid depth k (SPEC section 4: K = {0, s, 2s, ..., m}, or the preprint
  profile's) nearest to f*m (ties: the smaller), among k >= 1 (f > 0 never shows the problem alone). A trace whose fractions do not fall on distinct grid
  depths is not used (its items would be the same item in two cells). So every (teacher, depth) cell
  has exactly `problems` items. Problems are taken in one seeded order that puts first the problems
  every teacher has a trace for: when there are enough, all teachers share the same problems (a
  paired design), else each takes its own.
- Assignment. The cells are laid out in one cyclic order in which the teacher and the depth both
  turn at every step (a Latin square: cell c has teacher c mod T and depth (c + c // lcm(T, D)) mod D);
  participant p takes `per_participant` consecutive cells from cell (p x per_participant) mod C (the
  participants' blocks follow one another round the cycle, so every cell is answered about equally
  often: starting at p mod C instead, 4 participants of 4 items over 10 cells answered cells 7-9
  never), and in each cell an item
  of a problem they see nowhere else, the items answered by the fewest participants so far first
  (seeded ties; one assignment problem per participant, `scipy.optimize.linear_sum_assignment`).
  A participant never sees a problem twice; per participant the teachers' counts differ by at most one,
  and the depths' too when gcd(T, D) = 1 or `per_participant` is a multiple of C (else by at most two).
- Attention checks. `attention` items per participant at the grid depth where the prefix already
  states the gold answer (the smallest k >= `answer_first`, the first step stating it), taken from
  problems outside the study's items when there are such, placed at seeded random positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from legival_core.transfer.depths import preprint_depths, rollout_depths

if TYPE_CHECKING:
    import polars as pl

DESIGN_VERSION = "3"
"""3: a fraction > 0 never takes k = 0 (`nearest_depth`); 2: participants' blocks follow one another."""
"""Bump when the same candidates, config and seed would give another design."""

CANDIDATE_COLUMNS = ("trace_id", "teacher", "dataset", "problem_id", "m", "answer_first")

Kind = Literal["item", "attention"]


class DesignError(ValueError):
    """A design the candidates do not allow; `option` names the command-line option to change."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass(frozen=True, slots=True)
class StudyConfig:
    """Everything a design depends on (the CLI builds it from `settings.StudySettings`)."""

    name: str
    teachers: tuple[str, ...]
    problems: int
    depths: tuple[float, ...]
    per_participant: int
    participants: int
    attention: int
    seed: int
    minutes_per_item: float
    step_interval: int
    profile: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Item:
    item_id: str
    trace_id: str
    teacher: str
    dataset: str
    problem_id: str
    k: int
    m: int
    fraction: float | None
    """The asked fraction (None: an attention check)."""
    kind: Kind


@dataclass(frozen=True, slots=True)
class Assignment:
    code: str
    items: tuple[str, ...]
    """Item ids in the order shown (position 0 first)."""


@dataclass(frozen=True, slots=True)
class Design:
    config: StudyConfig
    items: tuple[Item, ...]
    assignments: tuple[Assignment, ...]
    version: str = DESIGN_VERSION

    def answers_per_item(self, kind: Kind = "item") -> dict[str, int]:
        counts = {i.item_id: 0 for i in self.items if i.kind == kind}
        for a in self.assignments:
            for item_id in a.items:
                if item_id in counts:
                    counts[item_id] += 1
        return counts

    def cells(self) -> list[dict[str, Any]]:
        """One row per (teacher, fraction): its items, the answers it gets, its mean k/m."""
        per = self.answers_per_item()
        rows = []
        for t in self.config.teachers:
            for f in self.config.depths:
                its = [i for i in self.items if i.kind == "item" and i.teacher == t and i.fraction == f]
                rows.append({"teacher": t, "fraction": f, "items": len(its),
                             "answers": sum(per[i.item_id] for i in its),
                             "mean_k_over_m": round(sum(i.k / i.m for i in its) / len(its), 3) if its else None})
        return rows

    def summary(self) -> dict[str, Any]:
        c = self.config
        per = list(self.answers_per_item().values())
        answers = sum(len(a.items) for a in self.assignments)
        return {"design_version": self.version, "seed": c.seed, "cells": len(c.teachers) * len(c.depths),
                "items": len(per), "attention_items": len(self.items) - len(per),
                "participants": c.participants, "per_participant": c.per_participant, "attention": c.attention,
                "answers_needed": answers,
                "answers_per_item": {"min": min(per, default=0), "max": max(per, default=0)},
                "participant_minutes": round(answers * c.minutes_per_item, 1)}


def grid(m: int, step_interval: int, profile: str) -> tuple[int, ...]:
    """The rollout depths K of a trace of m steps, as `transfer.rollout_plan.depths_for` chooses them."""
    return preprint_depths(m, step_interval) if profile == "preprint" else rollout_depths(m, step_interval)


def nearest_depth(f: float, m: int, depths: Sequence[int]) -> int:
    """The depth of `depths` nearest to f*m, the smaller on a tie (exact: f as its decimal). A fraction
    f > 0 takes only a depth k >= 1: k = 0 is the problem alone, which a study never shows for a prefix
    asked (f = 0.5 with m = 3 on the grid {0, 3} tied 0 and 3 and showed nothing; design version 3)."""
    target = Fraction(str(f)) * m
    shown = [k for k in depths if k >= 1] if f > 0 else list(depths)
    return min(shown or depths, key=lambda k: (abs(k - target), k))


def participant_codes(n: int) -> list[str]:
    width = max(2, len(str(n)))
    return [f"P{i:0{width}d}" for i in range(1, n + 1)]


def cell_order(n_teachers: int, n_depths: int) -> list[tuple[int, int]]:
    """The cyclic order of the (teacher, depth) cells: both indices turn at every step."""
    lcm = n_teachers * n_depths // math.gcd(n_teachers, n_depths)
    order = [(c % n_teachers, (c + c // lcm) % n_depths) for c in range(n_teachers * n_depths)]
    assert len(set(order)) == len(order)
    return order


def design_study(candidates: pl.DataFrame, config: StudyConfig) -> Design:
    """The design (module docstring) from `candidates`: one row per transfer trace (`CANDIDATE_COLUMNS`;
    `answer_first`: the first step stating the gold, null when none is known)."""
    import numpy as np
    import polars as pl

    missing = [c for c in CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        raise ValueError(f"candidates lack the column(s) {', '.join(missing)}")
    rng = np.random.default_rng(config.seed)
    cand = candidates.filter(pl.col("teacher").is_in(list(config.teachers)) & (pl.col("m") >= 1)).sort("trace_id")
    rows = cand.to_dicts()
    picked = _pick_traces(rows, config, rng)
    items = _items(picked, config)
    item_problems = {(i.dataset, i.problem_id) for i in items}
    if len(item_problems) < config.per_participant:
        raise DesignError("--per-participant", f"{config.per_participant} items per participant, but the study's "
                          f"items come from {len(item_problems)} distinct problems and a participant never sees "
                          "a problem twice: lower --per-participant or raise --problems")
    codes = participant_codes(config.participants)
    sequences = _assign(items, config, codes, rng)
    checks = _attention_items(rows, item_problems, config, rng, start=len(items))
    if config.attention:
        sequences = _add_checks(sequences, items, checks, config, rng)
    return Design(config, tuple(items) + tuple(checks),
                  tuple(Assignment(c, tuple(s)) for c, s in zip(codes, sequences, strict=True)))


def _pick_traces(rows: list[dict[str, Any]], config: StudyConfig, rng: Any) -> dict[str, list[dict[str, Any]]]:
    """Per teacher, `problems` eligible traces (distinct grid depths for the fractions), one per problem."""
    by_teacher: dict[str, dict[tuple[str, str], dict[str, Any]]] = {t: {} for t in config.teachers}
    order = rng.permutation(len(rows)) if rows else []
    merged = {t: 0 for t in config.teachers}  # traces left out: two fractions on one grid depth
    for i in order:
        r = rows[int(i)]
        ks = [nearest_depth(f, r["m"], grid(r["m"], config.step_interval, config.profile)) for f in config.depths]
        if len(set(ks)) == len(ks):
            by_teacher[r["teacher"]].setdefault((r["dataset"], r["problem_id"]), {**r, "ks": ks})
        elif r["teacher"] in merged:
            merged[r["teacher"]] += 1
    problems = sorted({p for d in by_teacher.values() for p in d})
    rank = dict(zip(problems, rng.permutation(len(problems)).tolist(), strict=True))
    cover = {p: sum(p in d for d in by_teacher.values()) for p in problems}
    ordered = sorted(problems, key=lambda p: (-cover[p], rank[p]))
    picked = {}
    for t in config.teachers:
        mine = [by_teacher[t][p] for p in ordered if p in by_teacher[t]]
        if len(mine) < config.problems:
            cells = ", ".join(f"{t} x {f:g}" for f in config.depths)
            raise DesignError("--problems", f"{config.problems} problems per teacher, but teacher {t} has "
                              f"{len(mine)} eligible transfer traces of distinct problems (correct, m >= 1, the "
                              f"fractions on distinct grid depths), so the cells {cells} are short: "
                              + (f"lower --problems to {len(mine)} or leave {t} out with --teachers" if mine else
                                 f"leave {t} out with --teachers")
                              + (f"; {merged[t]} of its traces are too short for --depths "
                                 f"{','.join(f'{f:g}' for f in config.depths)} (two fractions fall on one grid depth "
                                 f"with --step-interval {config.step_interval}): ask fewer fractions or a smaller "
                                 "--step-interval" if merged[t] else ""))
        picked[t] = mine[: config.problems]
    return picked


def _items(picked: dict[str, list[dict[str, Any]]], config: StudyConfig) -> list[Item]:
    out: list[Item] = []
    for t in config.teachers:
        for j, f in enumerate(config.depths):
            for r in sorted(picked[t], key=lambda r: (r["dataset"], r["problem_id"])):
                out.append(Item(f"I{len(out) + 1:04d}", r["trace_id"], t, r["dataset"], r["problem_id"],
                                r["ks"][j], r["m"], f, "item"))
    return out


def _assign(items: list[Item], config: StudyConfig, codes: list[str], rng: Any) -> list[list[str]]:
    """Per participant, item ids along the Latin square's cells (module docstring): their cells' items
    matched to distinct problems, the least answered so far first (one assignment problem each, so a
    participant's last cells are not left with only over-used items)."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    t_index = {t: i for i, t in enumerate(config.teachers)}
    d_index = {f: j for j, f in enumerate(config.depths)}
    order = cell_order(len(config.teachers), len(config.depths))
    cells: dict[tuple[int, int], dict[tuple[str, str], Item]] = {c: {} for c in order}
    for it in items:
        cells[(t_index[it.teacher], d_index[it.fraction])][(it.dataset, it.problem_id)] = it  # type: ignore[index]
    problems = sorted({(it.dataset, it.problem_id) for it in items})
    tie = {it.item_id: int(r) for it, r in zip(items, rng.permutation(len(items)), strict=True)}
    used = {it.item_id: 0 for it in items}
    blocked = float(len(items) + 1) ** 3
    out = []
    for p, code in enumerate(codes):
        mine = [order[(p * config.per_participant + j) % len(order)] for j in range(config.per_participant)]
        cost = np.full((len(mine), len(problems)), blocked)
        for j, cell in enumerate(mine):
            for q, prob in enumerate(problems):
                found = cells[cell].get(prob)
                if found is not None:
                    cost[j, q] = used[found.item_id] * (len(items) + 1) + tie[found.item_id]
        rows, cols = linear_sum_assignment(cost)
        if (cost[rows, cols] >= blocked).any():
            j = int(rows[cost[rows, cols] >= blocked][0])
            t, d = mine[j]
            raise DesignError("--per-participant", f"participant {code} cannot see {config.per_participant} items "
                              f"of distinct problems: cell {config.teachers[t]} x {config.depths[d]:g} has none "
                              "left they have not seen: lower --per-participant or raise --problems")
        seq = [cells[mine[j]][problems[q]] for j, q in zip(rows.tolist(), cols.tolist(), strict=True)]
        for it in seq:
            used[it.item_id] += 1
        out.append([it.item_id for it in seq])
    return out


def _attention_items(rows: list[dict[str, Any]], item_problems: set[tuple[str, str]], config: StudyConfig,
                     rng: Any, start: int) -> list[Item]:
    """The pool of attention checks: one trace per problem that states its gold, at the first grid depth
    whose prefix holds that statement; problems outside the study's items first."""
    if not config.attention:
        return []
    stated = [r for r in rows if r["answer_first"] is not None and 1 <= r["answer_first"] <= r["m"]]
    if not stated:
        raise DesignError("--attention", "no transfer trace of the chosen teachers states its gold answer in a "
                          "step the grader can read, so no attention check can be built: use --attention 0")
    rank = rng.permutation(len(stated)).tolist()
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    for r, _ in sorted(zip(stated, rank, strict=True),
                       key=lambda x: ((x[0]["dataset"], x[0]["problem_id"]) in item_problems, x[1])):
        chosen.setdefault((r["dataset"], r["problem_id"]), r)
    pool = list(chosen.values())[: config.attention * config.participants]
    out: list[Item] = []
    for r in pool:
        k = next(k for k in grid(r["m"], config.step_interval, config.profile) if k >= r["answer_first"])
        out.append(Item(f"A{len(out) + 1:04d}", r["trace_id"], r["teacher"], r["dataset"], r["problem_id"],
                        k, r["m"], None, "attention"))
    return out


def _add_checks(sequences: list[list[str]], items: list[Item], checks: list[Item], config: StudyConfig,
                rng: Any) -> list[list[str]]:
    """Each participant's `attention` checks (fewest used first, never a problem they see otherwise), at
    seeded random positions among their items."""
    problem_of = {c.item_id: (c.dataset, c.problem_id) for c in (*items, *checks)}
    used = {c.item_id: 0 for c in checks}
    out = []
    for seq, code in zip(sequences, participant_codes(config.participants), strict=True):
        seen = {problem_of[i] for i in seq}
        mine: list[str] = []
        for _ in range(config.attention):
            free = [c for c in checks if problem_of[c.item_id] not in seen]
            if not free:
                raise DesignError("--attention", f"participant {code} would see a problem twice: only "
                                  f"{len(checks)} problems state their answer in a step; lower --attention")
            best = min(free, key=lambda c: (used[c.item_id], c.item_id))
            used[best.item_id] += 1
            seen.add(problem_of[best.item_id])
            mine.append(best.item_id)
        total = len(seq) + len(mine)
        at = sorted(int(x) for x in rng.choice(total, size=len(mine), replace=False))
        merged, rest = [], iter(seq)
        for pos in range(total):
            merged.append(mine[at.index(pos)] if pos in at else next(rest))
        out.append(merged)
    return out

