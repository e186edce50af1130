"""The grading and analysis reads and writes of human studies (docs/study.md "Analysis"): the answers a
grader has not graded yet, their grades (replaced whole on a grader version bump), and the human student's
answers and depth rows for the report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


def answers_to_grade(store: Store, graders: pl.DataFrame, study: str | None = None) -> pl.DataFrame:
    """The answers (admin apart) with no grade by the current grader of their trace's dataset
    (`graders`: dataset, grader), with their problem: study, code, item_id, answer, dataset,
    problem_id, question, gold, choices, meta, grader; of the study `study` alone when given
    (`legival study grade --name`)."""
    import polars as pl

    if not store.has_table("study_grades"):
        return pl.DataFrame(schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            """
            SELECT s.study, s.code, s.item_id, s.answer, t.dataset, t.problem_id, p.question, p.gold,
                   p.choices, p.meta, cg.grader
            FROM study_answers s
            JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
            JOIN traces t ON t.trace_id = i.trace_id
            JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
            JOIN _graders cg ON cg.dataset = t.dataset
            WHERE NOT EXISTS (SELECT 1 FROM study_grades g WHERE g.study = s.study AND g.code = s.code
                              AND g.item_id = s.item_id AND g.grader_version = cg.grader)
              AND (? IS NULL OR s.study = ?)
            ORDER BY s.study, s.code, s.item_id
            """, [study, study])


def replace_study_grades(store: Store, rows: Sequence[dict[str, Any]]) -> int:
    """Store the grades of a chunk of answers in ONE transaction, replacing an older grade of the same
    answer (a grader version bump); rows: study, code, item_id, correct, extracted, grade_status,
    grader_version, read_as."""
    import polars as pl

    if not rows:
        return 0
    keys = pl.DataFrame({c: [r[c] for r in rows] for c in ("study", "code", "item_id")},
                        schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store.transaction(), store._bound("_keys", keys.to_arrow()):
        store._run("DELETE FROM study_grades g USING _keys k "
                   "WHERE g.study = k.study AND g.code = k.code AND g.item_id = k.item_id")
        store.insert_rows("study_grades", rows)
    return len(rows)


_HUMAN_ANSWERS = """
    WITH a AS (
        SELECT s.study, s.code, s.item_id, i.trace_id, i.k, i.m AS item_m, i.kind, s.rating,
               t.teacher, t.dataset, t.problem_id, g.correct, g.grade_status
        FROM study_answers s
        JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
        JOIN study_participants p ON p.study = s.study AND p.code = s.code AND NOT p.admin
        JOIN traces t ON t.trace_id = i.trace_id
        LEFT JOIN _graders cg ON cg.dataset = t.dataset
        LEFT JOIN study_grades g ON g.study = s.study AND g.code = s.code AND g.item_id = s.item_id
                                 AND g.grader_version = cg.grader),
    f AS (SELECT study, code, count(*) FILTER (WHERE kind = 'attention' AND NOT correct) AS attention_failed
          FROM a GROUP BY study, code)
    SELECT a.*, f.attention_failed::BIGINT AS attention_failed, f.attention_failed > ? AS excluded
    FROM a JOIN f USING (study, code)
"""
"""Every answer of every study with its item, trace and current grade (null: not graded by the current
grader); `excluded`: its participant failed more than `max_failures` graded attention checks."""


def human_answers(store: Store, graders: pl.DataFrame, max_failures: int) -> pl.DataFrame:
    """One row per stored answer of every study (admin apart): study, code, item_id, trace_id, k,
    item_m, kind, rating, teacher, dataset, problem_id, correct and grade_status (null when the
    current grader has not graded it: `legival study grade`), attention_failed (the participant's
    graded attention checks answered wrong) and excluded (more than `max_failures` of them)."""
    import polars as pl

    if not store.has_table("study_grades"):
        return pl.DataFrame(schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store._bound("_graders", graders.to_arrow()):
        return store._query(_HUMAN_ANSWERS + " ORDER BY a.study, a.code, a.item_id", [max_failures])


def human_depths(store: Store, traces: pl.DataFrame, graders: pl.DataFrame, max_failures: int) -> pl.DataFrame:
    """The human student's depth rows (`transfer.utility`'s input, less `six`): one row per (tix, k)
    of the traces in `traces` (trace_id, tix, m) with graded answers to a study item (attention
    checks and excluded participants left out, pooled over studies and participants): y = mean
    correctness, n_rollouts = answers, n_rollout_unparsed = answers graded unparsed, no overflow
    and no forcing. An item whose stored m is not the trace's m now (another segmentation) is left out."""
    import polars as pl

    schema = {"tix": pl.Int64, "k": pl.Int64, "m": pl.Int64, "y": pl.Float64, "n_rollouts": pl.Int64,
              "n_overflow": pl.Int64, "n_forced": pl.Int64, "n_rollout_unparsed": pl.Int64}
    if not store.has_table("study_grades") or traces.height == 0:
        return pl.DataFrame(schema=schema)
    with store._bound("_graders", graders.to_arrow()), \
            store._bound("_tix", traces.select("trace_id", "tix", "m").to_arrow()):
        out = store._query(
            f"""
            WITH h AS ({_HUMAN_ANSWERS})
            SELECT x.tix::BIGINT AS tix, h.k::BIGINT AS k, x.m::BIGINT AS m,
                   avg(CASE WHEN h.correct THEN 1.0 ELSE 0.0 END) AS y,
                   count(*)::BIGINT AS n_rollouts, 0::BIGINT AS n_overflow, 0::BIGINT AS n_forced,
                   count(*) FILTER (WHERE h.grade_status = 'unparsed')::BIGINT AS n_rollout_unparsed
            FROM h JOIN _tix x ON x.trace_id = h.trace_id AND x.m = h.item_m
            WHERE h.kind = 'item' AND NOT h.excluded AND h.correct IS NOT NULL
            GROUP BY x.tix, h.k, x.m ORDER BY x.tix, h.k
            """, [max_failures])
    return out.cast(schema)  # type: ignore[arg-type]


def study_grade_cells(store: Store, graders: pl.DataFrame, max_failures: int | None = None) -> pl.DataFrame:
    """Per (teacher, dataset) of the studies' items (attention checks apart): items, answers (stored),
    used (the answers of participants not excluded: at most `max_failures` graded attention checks
    wrong; None: every participant) and graded (of those used, by the current grader): the coverage
    rows of the human student, counting what human_study.csv uses."""
    import polars as pl

    schema = {"teacher": pl.Utf8, "dataset": pl.Utf8, "items": pl.Int64, "answers": pl.Int64, "used": pl.Int64,
              "graded": pl.Int64}
    if not store.has_table("study_grades"):
        return pl.DataFrame(schema=schema)
    limit = max_failures if max_failures is not None else 2**62
    with store._bound("_graders", graders.to_arrow()):
        out = store._query(
            """
            WITH graded AS (
                SELECT s.study, s.code, s.item_id, i.kind, g.correct
                FROM study_answers s
                JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
                JOIN traces t ON t.trace_id = i.trace_id
                LEFT JOIN _graders cg ON cg.dataset = t.dataset
                LEFT JOIN study_grades g ON g.study = s.study AND g.code = s.code AND g.item_id = s.item_id
                                         AND g.grader_version = cg.grader),
            f AS (SELECT study, code, count(*) FILTER (WHERE kind = 'attention' AND NOT correct) AS failed
                  FROM graded GROUP BY study, code)
            SELECT t.teacher, t.dataset, count(DISTINCT i.study || chr(0) || i.item_id)::BIGINT AS items,
                   count(a.item_id)::BIGINT AS answers,
                   count(a.item_id) FILTER (WHERE f.failed <= ?)::BIGINT AS used,
                   count(a.correct) FILTER (WHERE f.failed <= ?)::BIGINT AS graded
            FROM study_items i JOIN traces t ON t.trace_id = i.trace_id
            LEFT JOIN graded a ON a.study = i.study AND a.item_id = i.item_id
            LEFT JOIN f ON f.study = a.study AND f.code = a.code
            WHERE i.kind = 'item'
            GROUP BY t.teacher, t.dataset ORDER BY t.teacher, t.dataset
            """, [limit, limit])
    return out.cast(schema)  # type: ignore[arg-type]
