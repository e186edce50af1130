"""The dashboard's read model: the trace browser's lists and one trace's steps, similarities,
backtracking flags, grade and student rollouts (the static page embeds a sample; `legival serve`
asks per request).

`graders` is a frame (dataset, grader) naming the current grader key of each dataset (the report
layer decides it, `legival_core.datasets.base.current_graders`): a trace's grade is the one stored
under that key, never an older grader version's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


def trace_list(store: Store, graders: pl.DataFrame, teacher: str | None = None, dataset: str | None = None,
               per_cell: int | None = None) -> pl.DataFrame:
    """Traces for the browser: id, teacher, dataset, problem, correct (current grader; null when not
    graded by it), number of rollouts. With `per_cell`, the first `per_cell` per (teacher, dataset),
    traces with rollouts first (stable order)."""
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            """
            WITH r AS (SELECT trace_id, count(*) AS n_rollouts FROM rollouts GROUP BY trace_id),
            t AS (
                SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, g.correct,
                       coalesce(r.n_rollouts, 0) AS n_rollouts,
                       row_number() OVER (PARTITION BY t.teacher, t.dataset
                                          ORDER BY coalesce(r.n_rollouts, 0) = 0, t.problem_id, t.trace_id) AS rn
                FROM traces t LEFT JOIN r USING (trace_id)
                LEFT JOIN _graders cg ON cg.dataset = t.dataset
                LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader
                WHERE (? IS NULL OR t.teacher = ?) AND (? IS NULL OR t.dataset = ?)
            )
            SELECT trace_id, teacher, dataset, problem_id, correct, n_rollouts FROM t
            WHERE ? IS NULL OR rn <= ?
            ORDER BY teacher, dataset, problem_id, trace_id
            """,
            [teacher, teacher, dataset, dataset, per_cell, per_cell],
        )


@dataclass(frozen=True, slots=True)
class TraceRows:
    """Everything the trace view shows, as frames keyed by trace_id."""

    base: pl.DataFrame
    steps: pl.DataFrame
    similarities: pl.DataFrame
    lexical: pl.DataFrame
    judge_flags: pl.DataFrame
    rollouts: pl.DataFrame


def trace_rows(store: Store, trace_ids: Sequence[str], graders: pl.DataFrame, model: str, segmenter: str,
               lexical_metric: str) -> TraceRows:
    """`base` has the trace, its problem (question, gold) and its grade by the current grader
    (`grader`, `extracted`, `correct`, `grade_status`; null where that grader stored nothing)."""
    ids = list(trace_ids)
    with store._bound("_graders", graders.to_arrow()):
        base = store._query_ids(ids, """
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text,
                   p.question, p.gold, cg.grader, g.extracted, g.correct, g.status AS grade_status
            FROM traces t JOIN _ids USING (trace_id)
            LEFT JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
            LEFT JOIN _graders cg ON cg.dataset = t.dataset
            LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader
            """)
    return TraceRows(
        base=base,
        steps=store._query_ids(ids,
            "SELECT s.trace_id, s.idx, s.start_char, s.end_char FROM steps s JOIN _ids USING (trace_id) "
            "WHERE s.segmenter = ? ORDER BY s.trace_id, s.idx", [segmenter]),
        similarities=store._query_ids(ids,
            "SELECT s.trace_id, s.idx, s.max_prev_cos FROM step_similarity s JOIN _ids USING (trace_id) "
            "WHERE s.model = ? AND s.segmenter = ?", [model, segmenter]),
        lexical=store._query_ids(ids,
            "SELECT m.trace_id, m.detail FROM trace_metrics m JOIN _ids USING (trace_id) "
            "WHERE m.metric = ? AND m.method = 'lexical' AND m.status = 'ok'", [lexical_metric]),
        judge_flags=store._query_ids(ids, """
            SELECT trace_id, flagged_steps, 'judge:' || judge || '/' || model AS judge_method
            FROM judge_results JOIN _ids USING (trace_id)
            WHERE status = 'ok' AND fraction IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY created_at DESC, judge_key) = 1
            """),
        rollouts=store._query_ids(ids, """
            SELECT r.trace_id, coalesce(s.name, r.student_key) AS student, r.k, r.sample, r.m, r.status,
                   r.correct, r.forced, r.extracted, r.continuation, r.forced_continuation
            FROM rollouts r JOIN _ids USING (trace_id) LEFT JOIN students s USING (student_key)
            ORDER BY r.trace_id, student, r.k, r.sample
            """),
    )
