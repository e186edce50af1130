"""The step events' store side (docs/step_events.md): what the step_events stage reads and replaces, and what the
report and the dashboard read back.

Which (trace, student) pairs to compute is decided set-based, in one query (`pair_keys`): a pair's
inputs key hashes what its events are computed from (its rollouts' k, sample, m, status, correct and
prompt tokens, the trace's backtracking flags as the dashboard chooses them, the presence of its
similarity rows) and the caller's salt (code version, segmenter, embedding model); the stored key is
the one its events were written with. DuckDB's `hash` is stable within a DuckDB version: an upgrade
that changes it makes the next steps run recompute every pair once, nothing worse.

The backtracking flags of a trace follow the dashboard's rule (`store.dashboard.trace_rows`): the
newest `ok` judge result with a fraction, else the lexical cue row of the efficiency stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

_FLAGS = """
    j AS (SELECT trace_id, judge, model, judge_key, flagged_steps FROM judge_results JOIN {ids} USING (trace_id)
          WHERE status = 'ok' AND fraction IS NOT NULL
          QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY created_at DESC, judge_key) = 1),
    x AS (SELECT trace_id, detail FROM trace_metrics JOIN {ids} USING (trace_id)
          WHERE metric = $1 AND method = 'lexical' AND status = 'ok'
          QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY code_version DESC, params DESC) = 1),
    s AS (SELECT trace_id, count(*) AS n_sim FROM step_similarity JOIN {ids} USING (trace_id)
          WHERE model = $2 AND segmenter = $3 GROUP BY trace_id)"""
"""The per-trace inputs beside the rollouts: judge flags (j), lexical flags (x), similarity rows (s); the
parameters $1 = the lexical metric, $2 = the embedding model, $3 = the segmenter."""


def pair_keys(store: Store, model: str, segmenter: str, lexical_metric: str, salt: str) -> pl.DataFrame:
    """One row per (trace_id, student_key) with rollouts or stored events: `n_observed` (its depths with
    an ok sample; null without rollouts), `inputs_key` (null without rollouts), `stored_key` (the key
    its stored events were computed from; null when none are stored) and `trace_row`, where the trace
    sits in `traces` (its rowid: traces are append-only), so that its text is read in storage order."""
    stored = ("SELECT trace_id, student_key, any_value(inputs_key) AS stored_key FROM step_events GROUP BY ALL"
              if store.has_table("step_events") else
              "SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR AS student_key, NULL::VARCHAR AS stored_key WHERE false")
    return store._query(
        f"""
        WITH r AS (SELECT trace_id, student_key,
                          bit_xor(hash(k, sample, m, status, correct, prompt_tokens)) AS h, count(*) AS n,
                          count(DISTINCT k) FILTER (WHERE status = 'ok') AS n_observed
                   FROM rollouts GROUP BY trace_id, student_key),
        ids AS (SELECT DISTINCT trace_id FROM r),
        {_FLAGS.format(ids="ids")},
        e AS ({stored})
        SELECT trace_id, student_key, tr.rowid AS trace_row, r.n_observed::BIGINT AS n_observed,
               CASE WHEN r.trace_id IS NOT NULL THEN
                   hash(r.h, r.n, j.judge_key, j.flagged_steps, x.detail, coalesce(s.n_sim, 0), $4)::VARCHAR
               END AS inputs_key,
               e.stored_key
        FROM r LEFT JOIN j USING (trace_id) LEFT JOIN x USING (trace_id) LEFT JOIN s USING (trace_id)
        FULL JOIN e USING (trace_id, student_key)
        LEFT JOIN traces tr USING (trace_id)
        ORDER BY trace_id, student_key
        """,
        [lexical_metric, model, segmenter, salt],
    )


@dataclass(frozen=True, slots=True)
class StepInputs:
    """What the steps of some traces are computed from, traces numbered by the caller's `tix`.

    `traces`: tix, trace_id, dataset, gold, m (the rollouts' step count), flags (the chosen
    method's flagged step numbers as stored: a JSON list or {"steps": [...]}), backtracking_method
    ("judge:<judge>/<model>" | "lexical" | null), n_sim (its similarity rows);
    `steps`: tix, idx, start_char, end_char, max_cos (null where no r_i), by (tix, idx);
    `depths`: tix, si, k, y (mean correctness of the ok samples, null when none), prompt_tokens (by tix,
    si, k: no string per depth, for the 6M depths of a paper-scale store)."""

    traces: pl.DataFrame
    steps: pl.DataFrame
    depths: pl.DataFrame


def step_inputs(store: Store, traces: pl.DataFrame, pairs: pl.DataFrame, model: str, segmenter: str,
                lexical_metric: str) -> StepInputs:
    """The inputs of `pairs` (trace_id, student_key, si: the caller's number of the student within its
    trace), whose traces are the rows of `traces` (trace_id, tix, trace_row)."""
    with store._bound("_tix", traces.select("trace_id", "tix", "trace_row").to_arrow()), \
            store._bound("_pairs", pairs.select("trace_id", "student_key", "si").to_arrow()):
        meta = store._query(
            f"""
            WITH {_FLAGS.format(ids="_tix").strip()},
            rm AS (SELECT r.trace_id, max(r.m) AS m FROM rollouts r JOIN _pairs USING (trace_id, student_key)
                   GROUP BY r.trace_id)
            SELECT t.tix, tr.trace_id, t.trace_row, tr.dataset, p.gold, rm.m::BIGINT AS m,
                   CASE WHEN j.trace_id IS NOT NULL THEN j.flagged_steps ELSE x.detail END AS flags,
                   CASE WHEN j.trace_id IS NOT NULL THEN 'judge:' || j.judge || '/' || j.model
                        WHEN x.trace_id IS NOT NULL THEN 'lexical' END AS backtracking_method,
                   coalesce(s.n_sim, 0)::BIGINT AS n_sim
            FROM _tix t JOIN traces tr USING (trace_id)
            LEFT JOIN problems p ON p.dataset = tr.dataset AND p.problem_id = tr.problem_id
            LEFT JOIN rm USING (trace_id) LEFT JOIN j USING (trace_id) LEFT JOIN x USING (trace_id)
            LEFT JOIN s USING (trace_id)
            ORDER BY t.tix
            """,
            [lexical_metric, model, segmenter],
        )
        steps = store._query(
            """
            SELECT t.tix, s.idx, s.start_char, s.end_char, x.max_prev_cos AS max_cos
            FROM steps s JOIN _tix t USING (trace_id)
            LEFT JOIN step_similarity x ON x.trace_id = s.trace_id AND x.idx = s.idx
                 AND x.model = $1 AND x.segmenter = $2
            WHERE s.segmenter = $2
            ORDER BY t.tix, s.idx
            """,
            [model, segmenter],
        )
        depths = store._query(
            """
            SELECT t.tix, p.si, r.k,
                   avg(CASE WHEN r.status = 'ok' THEN CASE WHEN r.correct THEN 1.0 ELSE 0.0 END END) AS y,
                   max(r.prompt_tokens)::BIGINT AS prompt_tokens
            FROM rollouts r JOIN _pairs p USING (trace_id, student_key) JOIN _tix t USING (trace_id)
            GROUP BY t.tix, p.si, r.k
            ORDER BY t.tix, p.si, r.k
            """
        )
    return StepInputs(meta, steps, depths)


def trace_texts(store: Store, traces: pl.DataFrame) -> pl.DataFrame:
    """(tix, reasoning) of the rows of `traces` (trace_id, tix, trace_row: `pair_keys`' rowid), by tix:
    read a batch at a time, so that a plan over the whole store never holds every trace's text. The scan
    is kept to the batch's stretch of rows: joined on the id alone, DuckDB reads (and caches) nearly
    the whole column for any 10,000 traces (0.7 GB of the paper-scale store's)."""
    lo, hi = traces["trace_row"].min(), traces["trace_row"].max()
    with store._bound("_tix", traces.select("trace_id", "tix").to_arrow()):
        return store._query("SELECT t.tix, tr.reasoning FROM _tix t JOIN traces tr USING (trace_id) "
                            "WHERE tr.rowid BETWEEN ? AND ? ORDER BY t.tix", [lo, hi])


def replace_step_events(store: Store, pairs: pl.DataFrame, events: pa.Table, delete: bool = True) -> int:
    """Replace the events of `pairs` (trace_id, student_key) by `events` (an Arrow table with
    `step_events`' columns; a pair may have none), in one transaction; returns the rows inserted.
    `delete=False` when none of the pairs has stored events (a first run: nothing to scan for).

    A plain INSERT after the delete (`Store.insert_arrow` would turn it into an INSERT OR IGNORE, which
    scans every stored key): the pairs' keys are gone, so nothing can conflict."""
    cols = ", ".join(events.column_names)
    with store.transaction():
        if delete and pairs.height:
            with store._bound("_gone", pairs.select("trace_id", "student_key").to_arrow()):
                store._run("DELETE FROM step_events e USING _gone g "
                           "WHERE e.trace_id = g.trace_id AND e.student_key = g.student_key")
        if not events.num_rows:
            return 0
        with store._bound("_incoming", events):
            return int(store._run(f"INSERT INTO step_events ({cols}) SELECT {cols} FROM _incoming")[0][0])


_EVENT_COLUMNS = """e.trace_id, coalesce(s.name, e.student_key) AS student, e.k_start, e.k_end, e.m, e.outcome,
           e.y_start, e.y_end, e.n_steps, e.tokens_added, e.position, e.backtracking, e.backtracking_method,
           e.max_cos, e.answer_stated, e.self_check, {similarity} AS similarity"""


def _event_columns(store: Store) -> str:
    """The events' columns as read; `similarity` NULL on a store opened read-only whose table predates
    that column (its rows are of events version 1: every reader of the current version drops them)."""
    has = store._run("SELECT count(*) FROM information_schema.columns WHERE table_catalog = current_database() "
                     "AND table_schema = 'main' AND table_name = 'step_events' AND column_name = 'similarity'")[0][0]
    return _EVENT_COLUMNS.format(similarity="e.similarity" if has else "NULL::BOOLEAN")


def _empty_events(full: bool) -> pl.DataFrame:
    import polars as pl

    schema = {
        "trace_id": pl.Utf8, "student": pl.Utf8, "k_start": pl.Int32, "k_end": pl.Int32, "m": pl.Int32,
        "outcome": pl.Utf8, "y_start": pl.Float64, "y_end": pl.Float64, "n_steps": pl.Int32, "tokens_added": pl.Int32,
        "position": pl.Float64, "backtracking": pl.Boolean, "backtracking_method": pl.Utf8, "max_cos": pl.Float64,
        "answer_stated": pl.Boolean, "self_check": pl.Boolean, "similarity": pl.Boolean}
    return pl.DataFrame(schema={**schema, "student_key": pl.Utf8, "code_version": pl.Utf8} if full else schema)


def step_events(store: Store, code_version: str | None = None) -> pl.DataFrame:
    """Every stored step event, one row per (trace_id, student, k_start, k_end), with its student's name
    (`student`; the key where unnamed): what the report's step effects read (`reports.compute.
    step_effects`). `code_version` keeps the rows of that events version only. In no particular order
    (sort where an order matters): sorting the 5.6 M events of the paper-scale store doubled the read's
    memory (2.8 GiB against 1.3 GiB), as did the 64-character student key on every row. An older store
    opened read-only, which lacks the table, gives the empty frame (the same columns)."""
    if not store.has_table("step_events"):
        return _empty_events(full=False)
    where = "" if code_version is None else "WHERE e.code_version = ?"
    return store._query(f"SELECT {_event_columns(store)} FROM step_events e LEFT JOIN students s USING (student_key) "
                        f"{where}", [code_version] if code_version is not None else None)


def trace_events(store: Store, trace_ids: Sequence[str]) -> pl.DataFrame:
    """The stored step events of these traces, by trace, student and k_start: `step_events`' columns and
    the `student_key` and `code_version` of each row (the dashboard's trace view)."""
    if not store.has_table("step_events") or not trace_ids:
        return _empty_events(full=True)
    return store._query_ids(list(trace_ids), f"SELECT {_event_columns(store)}, e.student_key, e.code_version "
                            "FROM step_events e JOIN _ids USING (trace_id) LEFT JOIN students s USING (student_key) "
                            "ORDER BY e.trace_id, student, e.k_start")


def stored_pairs(store: Store) -> int:
    """How many (trace, student) pairs have stored events."""
    if not store.has_table("step_events"):
        return 0
    return int(store._run("SELECT count(*) FROM (SELECT DISTINCT trace_id, student_key FROM step_events)")[0][0])


def empty_step_events() -> pl.DataFrame:
    """`step_events`' columns with no row: what step_events.parquet holds when nothing is stored."""
    return _empty_events(full=False)


def step_coverage(store: Store, code_version: str) -> pl.DataFrame:
    """Per (teacher, dataset) of the stored traces: `pairs` ((trace, student) pairs with rollouts),
    `eligible` (those with two observed depths or more: the pairs that have events once the step_events stage
    ran), `traces_with_events` and `pairs_with_events` (events of `code_version`). The report's coverage
    rows of the step_events stage (`reports.compute.coverage`)."""
    events = ("SELECT DISTINCT trace_id, student_key FROM step_events WHERE code_version = $1"
              if store.has_table("step_events") else
              "SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR AS student_key WHERE $1 IS NULL AND false")
    return store._query(
        f"""
        WITH r AS (SELECT trace_id, student_key,
                          count(DISTINCT k) FILTER (WHERE status = 'ok') AS n_observed
                   FROM rollouts GROUP BY trace_id, student_key),
        e AS ({events}),
        p AS (SELECT trace_id, student_key, r.n_observed, e.trace_id IS NOT NULL AS has_events
              FROM r FULL JOIN e USING (trace_id, student_key))
        SELECT t.teacher, t.dataset,
               count(p.n_observed)::BIGINT AS pairs,
               count(*) FILTER (WHERE p.n_observed >= 2)::BIGINT AS eligible,
               count(DISTINCT p.trace_id) FILTER (WHERE p.has_events)::BIGINT AS traces_with_events,
               count(*) FILTER (WHERE p.has_events)::BIGINT AS pairs_with_events
        FROM p JOIN traces t USING (trace_id)
        GROUP BY t.teacher, t.dataset
        ORDER BY t.teacher, t.dataset
        """,
        [code_version],
    )


def step_teachers(store: Store) -> list[str]:
    """Every teacher with a stored trace, sorted (`legival step-events --teacher`'s choices)."""
    return [str(r[0]) for r in store._run("SELECT DISTINCT teacher FROM traces ORDER BY teacher")]


def teacher_datasets(store: Store, teacher: str) -> list[str]:
    """The datasets of `teacher`'s stored traces, sorted (`legival step-events --teacher T --dataset`'s choices)."""
    return [str(r[0]) for r in store._run("SELECT DISTINCT dataset FROM traces WHERE teacher = ? ORDER BY dataset",
                                          [teacher])]


def trace_dataset(store: Store, trace_id: str) -> str:
    """The dataset of a stored trace ('' when there is no such trace)."""
    rows = store._run("SELECT dataset FROM traces WHERE trace_id = ?", [trace_id])
    return str(rows[0][0]) if rows else ""


def has_rollouts(store: Store) -> bool:
    """Whether the store holds any rollout (without, the step_events stage has nothing to cut)."""
    return bool(store._run("SELECT count(*) FROM (SELECT 1 FROM rollouts LIMIT 1)")[0][0])


def close_trace_ids(store: Store, trace_id: str, limit: int = 3) -> list[str]:
    """The stored trace ids nearest to `trace_id` (Jaro-Winkler similarity), for an error that names an
    unknown one; none when nothing is close (similarity under 0.8)."""
    rows = store._run("SELECT trace_id FROM (SELECT trace_id, jaro_winkler_similarity(trace_id, ?) AS s FROM traces) "
                      "WHERE s >= 0.8 ORDER BY s DESC, trace_id LIMIT ?", [trace_id, limit])
    return [str(r[0]) for r in rows]


def trace_exists(store: Store, trace_id: str) -> bool:
    return bool(store._run("SELECT count(*) FROM traces WHERE trace_id = ?", [trace_id])[0][0])


def top_drop_segments(store: Store, teacher: str, code_version: str, limit: int, segmenter: str,
                      dataset: str | None = None) -> pl.DataFrame:
    """The `limit` segments (trace_id, k_start, k_end) of `teacher`'s traces (of `dataset` when given)
    with the most drops across students, among the stored events of `code_version`: `n_drops`,
    `n_students` (students with that segment), `dataset`, `problem_id` and `text`, the segment's steps
    k_start + 1 .. k_end joined by spaces (segmenter `segmenter`). Ties: more students first, then
    trace id and k_start (a stable order)."""
    import polars as pl

    if not store.has_table("step_events"):
        return pl.DataFrame(schema={"trace_id": pl.Utf8, "dataset": pl.Utf8, "problem_id": pl.Utf8,
                                    "k_start": pl.Int32, "k_end": pl.Int32, "n_drops": pl.Int64,
                                    "n_students": pl.Int64, "text": pl.Utf8})
    return store._query(
        """
        WITH seg AS (
            SELECT e.trace_id, t.dataset, t.problem_id, e.k_start, e.k_end,
                   count(*) FILTER (WHERE e.outcome = 'drop')::BIGINT AS n_drops, count(*)::BIGINT AS n_students
            FROM step_events e JOIN traces t USING (trace_id)
            WHERE e.code_version = $1 AND t.teacher = $2 AND ($3::VARCHAR IS NULL OR t.dataset = $3)
            GROUP BY ALL
            HAVING count(*) FILTER (WHERE e.outcome = 'drop') > 0
            ORDER BY n_drops DESC, n_students DESC, e.trace_id, e.k_start
            LIMIT $4)
        SELECT seg.trace_id, seg.dataset, seg.problem_id, seg.k_start, seg.k_end, seg.n_drops, seg.n_students,
               string_agg(substring(t.reasoning, s.start_char + 1, s.end_char - s.start_char), ' ' ORDER BY s.idx)
                   AS text
        FROM seg JOIN traces t USING (trace_id)
        LEFT JOIN steps s ON s.trace_id = seg.trace_id AND s.segmenter = $5 AND s.idx > seg.k_start
             AND s.idx <= seg.k_end
        GROUP BY ALL
        ORDER BY seg.n_drops DESC, seg.n_students DESC, seg.trace_id, seg.k_start
        """,
        [code_version, teacher, dataset, limit, segmenter],
    )
