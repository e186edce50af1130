"""A synthetic store for report tests, the dashboard demo and `benchmarks/aggregate.py`.

Rows follow the real stages' contracts: grades under the current grader key, trace_metrics under the
current params and code versions, r_i in `step_similarity`, and rollouts only for correct traces with
m >= 1 at the SPEC depths `K` with `bin_of` bins. Built with numpy and inserted through Arrow, so
millions of rollouts take seconds. Nothing here is a measurement: it exists to exercise the reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.datasets.base import grader_key
from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.metrics.redundancy import REDUNDANCY
from legival_core.metrics.step_len import STEP_LEN
from legival_core.metrics.token_len import TOKEN_LEN
from legival_core.run_config import Efficiency, Transfer
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.token_count import ENCODING_NAME
from legival_core.transfer.utility import bins_of
from legival_core.types import canonical_json

if TYPE_CHECKING:
    import numpy as np

_WORDS = ("we", "add", "the", "two", "numbers", "then", "check", "result", "carefully", "so", "total", "is")


@dataclass(frozen=True, slots=True)
class SyntheticCounts:
    traces: int
    rollouts: int
    similarities: int


def fill_synthetic(
    store: Store,
    teachers: Sequence[str] = ("alpha", "beta", "gamma"),
    datasets: Sequence[str] = ("gsm8k", "math"),
    students: Sequence[str] = ("student-a", "student-b"),
    traces_per_cell: int = 20,
    m_range: tuple[int, int] = (1, 12),
    step_interval: int = 3,
    seed: int = 0,
    with_text: bool = True,
    with_similarities: bool = True,
    accuracy_range: tuple[float, float] = (0.45, 0.85),
    n_bins: int = Transfer().n_bins,
) -> SyntheticCounts:
    """Insert `traces_per_cell` traces per (teacher, dataset) (problem i of a dataset is shared by all
    teachers), their grades and metrics, and rollouts of every student on the correct ones."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    n_t, n_d, n = len(teachers), len(datasets), traces_per_cell
    size = n_t * n_d * n
    ti = np.repeat(np.arange(n_t), n_d * n)
    di = np.tile(np.repeat(np.arange(n_d), n), n_t)
    pi = np.tile(np.arange(n), n_t * n_d)
    teacher = np.array(teachers, dtype=object)[ti]
    dataset = np.array(datasets, dtype=object)[di]
    pid = np.array([f"p{i:05d}" for i in range(n)], dtype=object)[pi]
    tid = np.array([f"{a}|{b}|{c}" for a, b, c in zip(teacher, dataset, pid, strict=True)], dtype=object)
    m = rng.integers(m_range[0], m_range[1] + 1, size=size)
    lo, hi = accuracy_range
    skill = lo + (hi - lo) * (np.arange(n_t) / max(n_t - 1, 1))
    correct = rng.random(size) < skill[ti]
    reasoning = [""] * size
    step_rows: list[dict[str, object]] = []
    if with_text:
        for i, k in enumerate(m):
            reasoning[i], spans = _text(rng, int(k))
            step_rows += [{"trace_id": tid[i], "segmenter": SEGMENTER_VERSION, "idx": j, "start_char": a,
                           "end_char": b} for j, (a, b) in enumerate(spans, start=1)]
    store.insert_arrow("traces", pa.table({
        "trace_id": tid, "teacher": teacher, "dataset": dataset, "problem_id": pid,
        "reasoning": reasoning, "answer_text": ["\\boxed{1}"] * size, "truncated": np.zeros(size, bool),
    }))
    if step_rows:
        store.insert_rows("steps", step_rows)
        store.insert_arrow("step_counts", pa.table({
            "trace_id": tid, "segmenter": [SEGMENTER_VERSION] * size, "m": m.astype(np.int32)}))
    graders = {d: grader_key(d) for d in datasets}
    store.insert_arrow("grades", pa.table({
        "trace_id": tid, "grader": [graders[d] for d in dataset], "extracted": ["1"] * size,
        "correct": correct, "status": np.where(rng.random(size) < 0.03, "unparsed", "ok"),
    }))
    token_len = (m * rng.integers(15, 40, size=size) * (1 + 0.3 * ti / max(n_t, 1))).astype(np.int64)
    redundancy = np.round(rng.beta(2, 6, size=size), 3) * (m >= 2)
    backtracking = np.round(rng.beta(1, 8, size=size), 3)
    eff = Efficiency()
    metric_rows = [
        (TOKEN_LEN, token_len, ENCODING_NAME),
        (STEP_LEN, m, "punkt"),
        (REDUNDANCY, redundancy, eff.model),
        (BACKTRACKING, backtracking, "lexical"),
    ]
    for tm, values, method in metric_rows:
        metric, params, version = tm.name, canonical_json(tm.params(eff)), tm.version
        store.insert_arrow("trace_metrics", pa.table({
            "trace_id": tid, "metric": [metric] * size, "params": [params] * size, "code_version": [version] * size,
            "value": values.astype(np.float64), "method": [method] * size, "status": ["ok"] * size,
        }))
    n_sim = 0
    if with_similarities:
        reps = np.maximum(m - 1, 0)
        sim_tid = np.repeat(tid, reps)
        idx = np.concatenate([np.arange(2, k + 1) for k in m]) if reps.sum() else np.zeros(0, np.int64)
        n_sim = len(sim_tid)
        store.insert_arrow("step_similarity", pa.table({
            "trace_id": sim_tid, "model": [eff.model] * n_sim, "segmenter": [SEGMENTER_VERSION] * n_sim,
            "idx": idx.astype(np.int32), "max_prev_cos": rng.beta(5, 2, size=n_sim),
        }))
    store.insert_rows("students", [
        {"student_key": f"key-{s}", "name": s, "model": s, "decoding": "greedy", "prompt_version": "1",
         "profile": "synthetic"} for s in students
    ])
    transfer = np.flatnonzero(correct & (m >= 1))
    n_roll = 0
    for si, s in enumerate(students):
        depths = [np.array((*range(0, int(m[i]), step_interval), int(m[i]))) for i in transfer]
        reps = np.array([len(d) for d in depths])
        rows = np.repeat(transfer, reps)
        k = np.concatenate(depths) if depths else np.zeros(0, np.int64)
        mm = m[rows]
        frac = k / mm
        p_ok = np.clip(0.15 + 0.1 * si + 0.7 * frac * (0.5 + 0.5 * ti[rows] / max(n_t - 1, 1)), 0, 1)
        ok = rng.random(len(k)) < p_ok
        overflow = rng.random(len(k)) < 0.01 * frac
        forced = rng.random(len(k)) < 0.1
        nb = bins_of(k, mm, n_bins)
        n_roll += len(k)
        store.insert_arrow("rollouts", pa.table({
            "trace_id": tid[rows], "student_key": [f"key-{s}"] * len(k), "k": k.astype(np.int32),
            "sample": np.zeros(len(k), np.int32), "m": mm.astype(np.int32), "bin": nb.astype(np.int32),
            "status": np.where(overflow, "overflow", "ok"),
            "correct": pa.array(ok, mask=overflow),
            "forced": forced & ~overflow,
            "extracted": pa.array(np.where(ok, "1", "2"), mask=overflow),
            "grade_status": pa.array(np.full(len(k), "ok"), mask=overflow),
            "prompt_tokens": (100 + k * 20).astype(np.int32),
            "completion_tokens": rng.integers(5, 200, size=len(k)).astype(np.int32),
        }))
    return SyntheticCounts(traces=size, rollouts=n_roll, similarities=n_sim)


def _text(rng: np.random.Generator, m: int) -> tuple[str, list[tuple[int, int]]]:
    """m sentences and their character spans."""
    text, spans = "", []
    for _ in range(m):
        words = rng.choice(_WORDS, size=int(rng.integers(4, 9)))
        s = " ".join(str(w) for w in words)
        s = s[0].upper() + s[1:] + "."
        if text:
            text += " "
        spans.append((len(text), len(text) + len(s)))
        text += s
    return text, spans


def early_answers_of(store: Store, student: str, reader: str | None = None) -> None:
    """Early answers of a reader (`reader`, default `early-<student>`) on every rollout depth of
    `student`: correct at full length, wrong before (docs/transfer.md "Early answering")."""
    from tests._sql import rows

    name = reader or f"early-{student}"
    rows(store, "INSERT INTO early_answers SELECT * REPLACE (? AS student_key, k = m AS correct, true AS forced, "
                "'' AS continuation) FROM rollouts WHERE student_key = ?", [f"key-{name}", f"key-{student}"])
    store.insert_rows("students", [{"student_key": f"key-{name}", "name": name, "model": name, "decoding": "{}",
                                    "prompt_version": "1", "profile": "spec"}])
