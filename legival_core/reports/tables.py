"""Per-(teacher, dataset) metric tables, read from the store alone (no model call).

Choices (docs/decisions.md): accuracy counts every trace (SPEC section 4); efficiency metrics
(lengths, redundancy, backtracking) are means/medians over the traces that are not truncated,
because a reasoning cut off by a token budget has an artificial length. `token_len_norm` is computed
here rather than stored, since its denominator (the median correct length of the problem across all
teachers) changes whenever a teacher is added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.datasets.base import get_dataset
from legival_core.embed import DEFAULT_MODEL
from legival_core.metrics.efficiency import (
    DEFAULT_TAU,
    LEXICAL_BACKTRACKING_VERSION,
    REDUNDANCY_VERSION,
    STEP_LEN_VERSION,
    TOKEN_LEN_VERSION,
)
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.efficiency import redundancy_params
from legival_core.store import Store
from legival_core.tokens import ENCODING_NAME
from legival_core.types import canonical_json

if TYPE_CHECKING:
    import polars as pl

TEACHER_DATASET_COLUMNS = [
    "teacher", "dataset", "n_traces", "accuracy", "token_len_median", "step_len_median", "redundancy",
    "backtracking", "backtracking_method", "token_len_mean", "token_len_norm", "n_correct",
    "n_unparsed", "n_truncated", "n_grade_timeouts",
]


def current_graders(store: Store) -> pl.DataFrame:
    """(dataset, grader key) of the grader version this code uses, for every dataset in the store."""
    import polars as pl

    datasets = store.query("SELECT DISTINCT dataset FROM traces")["dataset"].to_list()
    keys = []
    for d in datasets:
        spec = get_dataset(d)
        keys.append(f"{spec.name}@{spec.grader_version}")
    return pl.DataFrame({"dataset": datasets, "grader": keys}, schema={"dataset": pl.Utf8, "grader": pl.Utf8})


def trace_table(store: Store, tau: float = DEFAULT_TAU, model: str = DEFAULT_MODEL) -> pl.DataFrame:
    """One row per trace with its grade and efficiency metrics (null where not computed yet)."""
    from legival_core.reports.backtracking import judge_backtracking, prefer_judge

    graders = current_graders(store)
    store.con.register("_graders", graders.to_arrow())
    try:
        table = store.query(
            """
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.truncated, t.source_correct,
                   g.correct, g.status AS grade_status, g.extracted, g.groups_correct,
                   tl.value AS token_len, sl.value AS step_len, rd.value AS redundancy,
                   bt.value AS backtracking, bt.method AS backtracking_method
            FROM traces t
            LEFT JOIN _graders cg ON cg.dataset = t.dataset
            LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader
            LEFT JOIN trace_metrics tl ON tl.trace_id = t.trace_id AND tl.metric = 'token_len'
                 AND tl.params = ? AND tl.code_version = ?
            LEFT JOIN trace_metrics sl ON sl.trace_id = t.trace_id AND sl.metric = 'step_len'
                 AND sl.params = ? AND sl.code_version = ?
            LEFT JOIN trace_metrics rd ON rd.trace_id = t.trace_id AND rd.metric = 'redundancy'
                 AND rd.params = ? AND rd.code_version = ?
            LEFT JOIN trace_metrics bt ON bt.trace_id = t.trace_id AND bt.metric = 'backtracking'
                 AND bt.params = ? AND bt.code_version = ?
            ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id
            """,
            [
                canonical_json({"encoding": ENCODING_NAME}), TOKEN_LEN_VERSION,
                canonical_json({"segmenter": SEGMENTER_VERSION}), STEP_LEN_VERSION,
                redundancy_params(tau, model), REDUNDANCY_VERSION,
                canonical_json({"segmenter": SEGMENTER_VERSION}), LEXICAL_BACKTRACKING_VERSION,
            ],
        )
    finally:
        store.con.unregister("_graders")
    return prefer_judge(table, judge_backtracking(store))


def with_token_len_norm(traces: pl.DataFrame) -> pl.DataFrame:
    """token_len / median token_len of the correct traces of the same (dataset, problem) across all
    teachers (SPEC section 3); null when that problem has no correct trace."""
    import polars as pl

    med = (
        traces.filter(pl.col("correct") & ~pl.col("truncated") & pl.col("token_len").is_not_null())
        .group_by("dataset", "problem_id")
        .agg(pl.col("token_len").median().alias("_correct_median"))
    )
    return traces.join(med, on=["dataset", "problem_id"], how="left").with_columns(
        (pl.col("token_len") / pl.col("_correct_median")).alias("token_len_norm")
    ).drop("_correct_median")


def teacher_dataset_metrics(traces: pl.DataFrame) -> pl.DataFrame:
    """Aggregate a `trace_table` to one row per (teacher, dataset)."""
    import polars as pl

    t = with_token_len_norm(traces)
    eff = ~pl.col("truncated")
    out = (
        t.group_by("teacher", "dataset")
        .agg(
            pl.len().alias("n_traces"),
            pl.col("correct").fill_null(False).mean().alias("accuracy"),
            pl.col("correct").fill_null(False).sum().alias("n_correct"),
            (pl.col("grade_status") == "unparsed").sum().alias("n_unparsed"),
            pl.col("truncated").sum().alias("n_truncated"),
            (pl.col("grade_status") == "timeout").sum().alias("n_grade_timeouts"),
            pl.col("token_len").filter(eff).median().alias("token_len_median"),
            pl.col("token_len").filter(eff).mean().alias("token_len_mean"),
            pl.col("token_len_norm").filter(eff).mean().alias("token_len_norm"),
            pl.col("step_len").filter(eff).median().alias("step_len_median"),
            pl.col("redundancy").filter(eff).mean().alias("redundancy"),
            pl.col("backtracking").filter(eff).mean().alias("backtracking"),
            pl.col("backtracking_method").drop_nulls().unique().sort().str.join("+").alias("backtracking_method"),
        )
        .sort("teacher", "dataset")
    )
    return out.select(TEACHER_DATASET_COLUMNS)


# --- transfer inputs (rollouts) ------------------------------------------------------------------------


def student_table(store: Store) -> pl.DataFrame:
    """(six, student_key, student): one row per student with rollouts, `student` the display name.

    The name comes from the `students` table; a name shared by several student keys (e.g. two decoding
    profiles of one model) is suffixed with the first 8 characters of the key so they stay apart."""
    import polars as pl

    s = store.query(
        """
        SELECT k.student_key, coalesce(s.name, k.student_key) AS name
        FROM (SELECT DISTINCT student_key FROM rollouts) k
        LEFT JOIN students s USING (student_key)
        ORDER BY name, k.student_key
        """
    )
    dup = pl.col("name").count().over("name") > 1
    return s.with_columns(
        pl.when(dup).then(pl.col("name") + "@" + pl.col("student_key").str.slice(0, 8))
        .otherwise(pl.col("name")).alias("student"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("six"),
    ).select("six", "student_key", "student")


def rollout_depths(store: Store, traces: pl.DataFrame, students: pl.DataFrame) -> pl.DataFrame:
    """One row per (trace, student, depth k) for the traces in `traces` (which carry an integer `tix`):
    `m`, `y` = mean correctness of the `ok` samples (null when all overflowed) and the rollout counts.

    Grouping happens in DuckDB and only integers leave it, so millions of rollouts stay small."""
    store.con.register("_tix", traces.select("trace_id", "tix").to_arrow())
    store.con.register("_six", students.select("student_key", "six").to_arrow())
    try:
        return store.query(
            """
            SELECT t.tix, s.six, r.k, max(r.m)::BIGINT AS m,
                   avg(CASE WHEN r.status = 'ok' THEN CASE WHEN r.correct THEN 1.0 ELSE 0.0 END END) AS y,
                   count(*)::BIGINT AS n_rollouts,
                   count(*) FILTER (WHERE r.status = 'overflow')::BIGINT AS n_overflow,
                   count(*) FILTER (WHERE r.status = 'ok' AND r.forced)::BIGINT AS n_forced,
                   count(*) FILTER (WHERE r.status = 'ok' AND r.grade_status = 'unparsed')::BIGINT
                       AS n_rollout_unparsed
            FROM rollouts r JOIN _tix t USING (trace_id) JOIN _six s USING (student_key)
            GROUP BY t.tix, s.six, r.k
            """
        )
    finally:
        store.con.unregister("_tix")
        store.con.unregister("_six")


def redundancy_sweep_table(
    store: Store, thresholds: list[float], model: str = DEFAULT_MODEL
) -> pl.DataFrame:
    """trace_id -> redundancy at each threshold (columns `thr_<i>`), from the stored r_i
    (`step_similarity`); traces with fewer than two steps have no r_i and redundancy 0 (SPEC section 3).
    Only traces with stored similarities appear; the caller fills m < 2 traces with 0."""
    cols = ", ".join(
        f"count(*) FILTER (WHERE max_prev_cos > {float(t)!r})::DOUBLE / count(*) AS thr_{i}"
        for i, t in enumerate(thresholds)
    )
    return store.query(
        f"SELECT trace_id, {cols} FROM step_similarity WHERE model = ? AND segmenter = ? GROUP BY trace_id",
        [model, SEGMENTER_VERSION],
    )


def write_rollouts_parquet(store: Store, traces: pl.DataFrame, students: pl.DataFrame, path: str) -> int:
    """`rollouts.parquet` (CLI.md): written by DuckDB straight to disk, so its size never sits in memory."""
    store.con.register("_tr", traces.select("trace_id", "teacher", "dataset", "problem_id").to_arrow())
    store.con.register("_st", students.select("student_key", "student").to_arrow())
    try:
        n = store.run("SELECT count(*) FROM rollouts JOIN _tr USING (trace_id)")[0][0]
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
    finally:
        store.con.unregister("_tr")
        store.con.unregister("_st")
    return int(n)
