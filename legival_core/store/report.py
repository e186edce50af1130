"""The report's read model: the tables `legival report` aggregates, read with no model call.

The report decides WHICH rows it wants (metric keys from the registry, the current grader of each
dataset); these functions only fetch them. Grouping of rollouts happens in DuckDB, so millions of
rollouts leave it as small integer frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


def trace_grades(store: Store, graders: pl.DataFrame, segmenter: str) -> pl.DataFrame:
    """One row per trace with its grade by the current grader of its dataset and its step count `m`
    under `segmenter` (null where not graded / not segmented yet)."""
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            """
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.truncated, t.source_correct,
                   g.correct, g.status AS grade_status, g.extracted, g.groups_correct, c.m
            FROM traces t
            LEFT JOIN _graders cg ON cg.dataset = t.dataset
            LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader
            LEFT JOIN step_counts c ON c.trace_id = t.trace_id AND c.segmenter = ?
            ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id
            """,
            [segmenter],
        )


def metric_values(store: Store, keys: pl.DataFrame) -> pl.DataFrame:
    """(trace_id, metric, value, method) of the rows matching `keys` (metric, params, code_version)."""
    with store._bound("_mkeys", keys.to_arrow()):
        return store._query(
            "SELECT m.trace_id, m.metric, m.value, m.method FROM trace_metrics m "
            "JOIN _mkeys k ON k.metric = m.metric AND k.params = m.params AND k.code_version = m.code_version"
        )


def judge_backtracking(store: Store) -> pl.DataFrame:
    """trace_id -> (judge_fraction, judge_method) from the newest `ok` judge result per trace.

    `judge_method` is "judge:<judge>/<model>" so a report says which judge produced each number.
    Failed or overflowing judge results never count as "no backtracking": those traces fall back.
    """
    return store._query(
        """
        SELECT trace_id, fraction AS judge_fraction,
               'judge:' || judge || '/' || model AS judge_method
        FROM judge_results
        WHERE status = 'ok' AND fraction IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY created_at DESC, judge_key) = 1
        """
    )


def students_with_rollouts(store: Store) -> pl.DataFrame:
    """(student_key, name) of every student with rollouts, name from `students` (else the key)."""
    return store._query(
        """
        SELECT k.student_key, coalesce(s.name, k.student_key) AS name
        FROM (SELECT DISTINCT student_key FROM rollouts) k
        LEFT JOIN students s USING (student_key)
        ORDER BY name, k.student_key
        """
    )


def early_readers(store: Store) -> pl.DataFrame:
    """(student_key, name) of every early-answer reader with stored early answers (docs/transfer.md
    "Early answering"), name from `students` (else the key). A store last written before the table
    existed (opened read-only, so not yet given it) has none."""
    import polars as pl

    if not store.has_table("early_answers"):
        return pl.DataFrame(schema={"student_key": pl.Utf8, "name": pl.Utf8})
    return store._query(
        """
        SELECT k.student_key, coalesce(s.name, k.student_key) AS name
        FROM (SELECT DISTINCT student_key FROM early_answers) k
        LEFT JOIN students s USING (student_key)
        ORDER BY name, k.student_key
        """
    )


def rollout_depths(store: Store, traces: pl.DataFrame, students: pl.DataFrame, table: str = "rollouts") -> pl.DataFrame:
    """One row per (trace, student, depth k) for the traces in `traces` (which carry an integer `tix`):
    `m`, `y` = mean correctness of the `ok` samples (null when all overflowed) and the rollout counts;
    `table`: `rollouts`, or `early_answers` for the early-answer readers."""
    assert table in ("rollouts", "early_answers"), table
    with store._bound("_tix", traces.select("trace_id", "tix").to_arrow()), \
            store._bound("_six", students.select("student_key", "six").to_arrow()):
        return store._query(
            f"""
            SELECT t.tix, s.six, r.k, max(r.m)::BIGINT AS m,
                   avg(CASE WHEN r.status = 'ok' THEN CASE WHEN r.correct THEN 1.0 ELSE 0.0 END END) AS y,
                   count(*)::BIGINT AS n_rollouts,
                   count(*) FILTER (WHERE r.status = 'overflow')::BIGINT AS n_overflow,
                   count(*) FILTER (WHERE r.status = 'ok' AND r.forced)::BIGINT AS n_forced,
                   count(*) FILTER (WHERE r.status = 'ok' AND r.grade_status = 'unparsed')::BIGINT
                       AS n_rollout_unparsed
            FROM {table} r JOIN _tix t USING (trace_id) JOIN _six s USING (student_key)
            GROUP BY t.tix, s.six, r.k
            """
        )


def redundancy_sweep(store: Store, thresholds: Sequence[float], model: str, segmenter: str) -> pl.DataFrame:
    """trace_id -> redundancy at each threshold (columns `thr_<i>`), from the stored r_i; only traces
    with stored similarities appear (the caller fills m < 2 traces with 0)."""
    cols = ", ".join(
        f"count(*) FILTER (WHERE max_prev_cos > {float(t)!r})::DOUBLE / count(*) AS thr_{i}"
        for i, t in enumerate(thresholds)
    )
    return store._query(
        f"SELECT trace_id, {cols} FROM step_similarity WHERE model = ? AND segmenter = ? GROUP BY trace_id",
        [model, segmenter],
    )


def write_rollouts_parquet(store: Store, traces: pl.DataFrame, students: pl.DataFrame, path: str) -> int:
    """`rollouts.parquet` (CLI.md): written by DuckDB straight to disk, so its size never sits in memory."""
    with store._bound("_tr", traces.select("trace_id", "teacher", "dataset", "problem_id").to_arrow()), \
            store._bound("_st", students.select("student_key", "student").to_arrow()):
        n = store._run("SELECT count(*) FROM rollouts JOIN _tr USING (trace_id)")[0][0]
        store.con.execute(
            """
            COPY (
                SELECT t.teacher, t.dataset, t.problem_id, r.trace_id, s.student, r.k, r.m, r.bin,
                       r.correct, r.forced, r.status, r.prompt_tokens, r.completion_tokens
                FROM rollouts r JOIN _tr t USING (trace_id) JOIN _st s USING (student_key)
                ORDER BY t.teacher, t.dataset, t.problem_id, r.trace_id, s.student, r.k, r.sample
            ) TO ? (FORMAT parquet)
            """,
            [path],
        )
    return int(n)


def teacher_datasets(store: Store) -> pl.DataFrame:
    return store._query("SELECT DISTINCT teacher, dataset FROM traces ORDER BY teacher, dataset")


def trace_teachers(store: Store) -> pl.DataFrame:
    return store._query("SELECT trace_id, teacher FROM traces")


def quality_rows(store: Store, metrics: Sequence[str], with_detail: bool = False) -> pl.DataFrame:
    """(teacher, dataset, trace_id, metric, value, status[, detail]) of the text-quality rows: per
    metric, the params and code version with the most 'ok' rows (ties: the latest params, then version)."""
    detail = ", m.detail" if with_detail else ""
    return store._query(
        "WITH m AS (SELECT x.*, t.teacher, t.dataset FROM trace_metrics x JOIN traces t USING (trace_id) "
        "WHERE list_contains(?, x.metric)), "
        "pick AS (SELECT metric, params, code_version, count(*) FILTER (WHERE status = 'ok') AS n_ok, "
        "row_number() OVER (PARTITION BY metric ORDER BY count(*) FILTER (WHERE status = 'ok') DESC, "
        "params DESC, code_version DESC) AS r FROM m GROUP BY metric, params, code_version) "
        f"SELECT m.teacher, m.dataset, m.trace_id, m.metric, m.value, m.status{detail} FROM m JOIN pick p "
        "ON p.metric = m.metric AND p.params = m.params AND p.code_version = m.code_version WHERE p.r = 1",
        [list(metrics)],
    )


def monitor_verdicts(store: Store, supervisor: str | None = None) -> pl.DataFrame:
    """Stored verdicts of one supervisor (default: the one with the most verdicts)."""
    if supervisor is None:
        top = store._query(
            "SELECT supervisor, count(*) AS n FROM monitor_results GROUP BY 1 ORDER BY n DESC, 1 LIMIT 1")
        if top.height == 0:
            return store._query("SELECT * FROM monitor_results WHERE false")
        supervisor = str(top["supervisor"][0])
    return store._query("SELECT * FROM monitor_results WHERE supervisor = ?", [supervisor])


def rm_rows(store: Store, code_version: str) -> pl.DataFrame:
    """(trace_id, metric, value) of the reward-model rows (metric `rm:...`) with status 'ok'."""
    return store._query(
        "SELECT trace_id, metric, value FROM trace_metrics WHERE metric LIKE 'rm:%' AND status = 'ok' "
        "AND code_version = ?", [code_version])


def metric_status_counts(store: Store) -> dict[tuple[str, str, str], dict[str, object]]:
    """(teacher, dataset, stored metric) -> {"ok": rows with a value, "unavailable": rows whose model
    is not installed, "reason": one such row's detail, "n": all rows}; monitor verdicts under the
    metric name "monitor". What the report's coverage needs to tell "not run" from "unavailable"."""
    rows = store._run(
        """
        SELECT t.teacher, t.dataset, x.metric,
               count(*) FILTER (WHERE x.status = 'ok' AND x.value IS NOT NULL) AS ok,
               count(*) FILTER (WHERE x.status = 'unavailable') AS unavailable,
               any_value(x.detail) FILTER (WHERE x.status = 'unavailable') AS detail,
               count(*) AS n
        FROM trace_metrics x JOIN traces t USING (trace_id)
        GROUP BY t.teacher, t.dataset, x.metric
        UNION ALL
        SELECT teacher, dataset, 'monitor', count(*) FILTER (WHERE status <> 'overflow'), 0, NULL, count(*)
        FROM monitor_results GROUP BY teacher, dataset
        """
    )
    return {(t, d, m): {"ok": ok, "unavailable": un, "detail": detail, "n": n} for t, d, m, ok, un, detail, n in rows}
