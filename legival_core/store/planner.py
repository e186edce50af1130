"""The stages' read model: what is missing, and the inputs to compute it.

Each function answers one question a stage's `plan` asks; none writes. Inputs are whole frames or
typed rows so that a stage's `run` needs no store at all (it may run on another process).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

from legival_core.bulk import gc_paused
from legival_core.store.db import Store
from legival_core.types import Span

if TYPE_CHECKING:
    import polars as pl


# --- traces and steps ------------------------------------------------------------------------------


def existing_trace_ids(store: Store, ids: Sequence[str]) -> set[str]:
    return {r[0] for r in store._with_ids(ids, "SELECT t.trace_id FROM traces t JOIN _ids USING (trace_id)")}


def stored_datasets(store: Store) -> list[str]:
    return [r[0] for r in store._run("SELECT DISTINCT dataset FROM traces ORDER BY dataset")]


def traces_missing_steps(store: Store, segmenter: str) -> pl.DataFrame:
    """(trace_id, reasoning) of the traces with no steps for `segmenter`.

    The ids first, then the text of those only: an anti join that projects `reasoning` reads the
    whole text column even when nothing is missing (every shard of a resumed run asks). Before the
    anti join (37 ms per shard at 100k traces), two counts (~2 ms): as many step counts of
    `segmenter` as traces means none is missing. That rests on two rules of this package, not on a
    key (the primary key only stops a trace being counted twice): traces are append-only (no
    statement deletes or rewrites one: `tests/core/test_architecture.py` checks) and a step count is
    only inserted for a trace read from `traces` (the segment stage)."""
    import polars as pl

    none = pl.DataFrame(schema={"trace_id": pl.Utf8, "reasoning": pl.Utf8})
    (traces, counted), = store._run(
        "SELECT (SELECT count(*) FROM traces), (SELECT count(*) FROM step_counts WHERE segmenter = ?)", [segmenter])
    if traces == counted:
        return none
    ids = store._query(
        "SELECT t.trace_id FROM traces t "
        "WHERE NOT EXISTS (SELECT 1 FROM step_counts c WHERE c.trace_id = t.trace_id "
        "AND c.segmenter = ?)",
        [segmenter],
    )
    if ids.height == 0:
        return none
    return store._query_ids(
        ids["trace_id"].to_list(),
        "SELECT t.trace_id, t.reasoning FROM traces t JOIN _ids USING (trace_id) ORDER BY t.trace_id",
    )


def traces_missing_metric(store: Store, metric: str, params: str, code_version: str) -> pl.DataFrame:
    """(trace_id, reasoning) of the traces with no row of `metric` at these params and version."""
    return store._query(
        "SELECT t.trace_id, t.reasoning FROM traces t WHERE NOT EXISTS (SELECT 1 FROM "
        "trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? AND x.params = ? "
        "AND x.code_version = ?) ORDER BY t.trace_id",
        [metric, params, code_version],
    )


def step_spans(store: Store, trace_ids: Sequence[str], segmenter: str) -> dict[str, list[Span]]:
    """trace_id -> [Span(start, end), ...] in step order (traces with no steps map to []).

    Read as Arrow columns and cut per trace (a transfer plan asks for millions of spans: each is built
    once, as the `Span` the caller keeps, not as a pair converted later)."""
    out: dict[str, list[Span]] = {t: [] for t in trace_ids}
    if not trace_ids:
        return out
    frame = store._query_ids(
        trace_ids,
        "SELECT s.trace_id, s.start_char, s.end_char FROM steps s JOIN _ids USING (trace_id) "
        "WHERE s.segmenter = ? ORDER BY s.trace_id, s.idx",
        [segmenter],
    )
    with gc_paused():  # millions of tuples at paper scale
        # tuple.__new__(Span, pair) is what Span._make runs, without a Python frame per span (2x faster)
        pairs: list[Span] = list(map(tuple.__new__, repeat(Span), zip(frame["start_char"].to_list(),
                                                                      frame["end_char"].to_list(), strict=True)))
        runs = frame["trace_id"].rle()
        at = 0
        for n, tid in zip(runs.struct.field("len").to_list(), runs.struct.field("value").to_list(), strict=True):
            out[tid] = pairs[at : at + n]
            at += n
    return out


def max_prev_similarities(store: Store, trace_ids: Sequence[str], model: str, segmenter: str) -> dict[str, list[float]]:
    """trace_id -> r_2..r_m for the traces whose similarities are stored."""
    out: dict[str, list[float]] = {}
    rows = store._with_ids(
        trace_ids,
        "SELECT s.trace_id, s.max_prev_cos FROM step_similarity s JOIN _ids USING (trace_id) "
        "WHERE s.model = ? AND s.segmenter = ? ORDER BY s.trace_id, s.idx",
        [model, segmenter],
    )
    for tid, r in rows:
        out.setdefault(tid, []).append(float(r))
    return out


def cached_embeddings(store: Store, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
    """sentence hash -> stored vector (little-endian float32 bytes) of those `hashes` embedded with
    `model` (an `embed.embedding_key`), from the cache shared by every stage that embeds."""
    rows = store._with_ids(
        list(hashes),
        "SELECT e.sentence_hash, e.vector FROM sentence_embeddings e JOIN _h USING (sentence_hash) "
        "WHERE e.model = ?",
        [model], name="_h", column="sentence_hash",
    )
    return {h: bytes(v) for h, v in rows}


def traces_with_problems(store: Store, graders: pl.DataFrame) -> pl.DataFrame:
    """Every trace with its problem's question and its grade by the current grader (monitorability)."""
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            "SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text, t.truncated, "
            "p.question, coalesce(g.correct, false) AS correct FROM traces t "
            "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
            "JOIN _graders cg ON cg.dataset = t.dataset "
            "LEFT JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader "
            "ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id")


def traces_missing_grades(store: Store, graders: pl.DataFrame) -> pl.DataFrame:
    """Traces with no grade from the current grader of their dataset, with their problem (the grade stage)."""
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            "SELECT t.trace_id, t.dataset, t.problem_id, t.reasoning, t.answer_text, t.truncated, cg.grader, "
            "p.question, p.gold, p.choices, p.meta FROM traces t "
            "JOIN _graders cg ON cg.dataset = t.dataset "
            "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
            "WHERE NOT EXISTS (SELECT 1 FROM grades g WHERE g.trace_id = t.trace_id AND g.grader = cg.grader) "
            "ORDER BY t.trace_id")


def count_correct(store: Store, grader: str, trace_ids: Sequence[str]) -> int:
    return int(store._run(
        "SELECT count(*) FROM grades WHERE grader = ? AND correct AND list_contains(?, trace_id)",
        [grader, list(trace_ids)])[0][0])


# --- transfer --------------------------------------------------------------------------------------


def correct_traces_with_steps(
    store: Store, graders: pl.DataFrame, segmenter: str, teacher: str | None, dataset: str | None
) -> pl.DataFrame:
    """Complete traces graded correct by the current grader of their dataset, with their step
    count m (no text: `transfer_inputs` reads it for the traces a plan keeps), in the stable order
    (teacher, dataset, problem_id, trace_id); `rn` numbers them within (teacher, dataset)."""
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            """
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, c.m,
                   row_number() OVER (PARTITION BY t.teacher, t.dataset ORDER BY t.problem_id, t.trace_id) AS rn
            FROM traces t
            JOIN _graders cg ON cg.dataset = t.dataset
            JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader AND g.correct
            JOIN step_counts c ON c.trace_id = t.trace_id AND c.segmenter = ?
            WHERE NOT t.truncated AND (? IS NULL OR t.teacher = ?) AND (? IS NULL OR t.dataset = ?)
            ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id
            """,
            [segmenter, teacher, teacher, dataset, dataset],
        )


def transfer_inputs(store: Store, trace_ids: Sequence[str], teacher: str | None = None,
                    dataset: str | None = None) -> pl.DataFrame:
    """(trace_id, reasoning, question, gold, choices) of these traces (any order). Naming the shard's
    teacher and dataset lets DuckDB skip the row groups of other cells (10x on a paper-scale store:
    the join alone reads every trace's text)."""
    where, params = [], []
    for column, value in (("teacher", teacher), ("dataset", dataset)):
        if value is not None:
            where.append(f"t.{column} = ?")
            params.append(value)
    return store._query_ids(
        trace_ids,
        "SELECT t.trace_id, t.reasoning, p.question, p.gold, p.choices FROM traces t JOIN _ids USING (trace_id) "
        "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id"
        + (" WHERE " + " AND ".join(where) if where else ""),
        params,
    )


def student_stored(store: Store, student_key: str) -> bool:
    return bool(store._run("SELECT count(*) FROM students WHERE student_key = ?", [student_key])[0][0])


ROLLOUT_TABLES = ("rollouts", "early_answers")
"""The tables of the transfer engine's rows: a student's (`rollouts`) and early answers (`early_answers`)."""


def stored_rollout_depths(store: Store, student_key: str, trace_ids: Sequence[str],
                          table: str = "rollouts") -> dict[str, frozenset[int]]:
    """trace_id -> the depths k of its stored rollouts (sample 0) of `student_key` in `table` (one of
    `ROLLOUT_TABLES`), for those of these traces that have any (one list per trace from DuckDB: a resume
    plan compares sets per trace instead of building a (trace, k) pair per stored rollout)."""
    if not trace_ids:
        return {}
    assert table in ROLLOUT_TABLES, table
    frame = store._query_ids(
        trace_ids,
        f"SELECT r.trace_id, list(r.k) AS ks FROM {table} r JOIN _ids USING (trace_id) "
        "WHERE r.student_key = ? AND r.sample = 0 GROUP BY r.trace_id",
        [student_key],
    )
    return dict(zip(frame["trace_id"].to_list(), map(frozenset, frame["ks"].to_list()), strict=True))


def sample_rollout_keys(store: Store, fraction: float, seed: int = 0) -> pl.DataFrame:
    """A deterministic pseudo-random `fraction` of the stored rollouts' keys (trace_id, student_key,
    k, sample), chosen by a seeded hash of the key (the same rows on every run of the same store):
    what `benchmarks/scale.py` deletes to measure planning a resume."""
    return store._query(
        "SELECT trace_id, student_key, k, sample FROM rollouts "
        "WHERE hash(trace_id, student_key, k, sample, ?) % 1000000 < ? ORDER BY ALL",
        [int(seed), round(float(fraction) * 1_000_000)],
    )


def mean_rollout_completion_tokens(store: Store, student_key: str) -> float | None:
    """Mean tokens a stored rollout of this student decoded (both passes); None when none is stored."""
    row = store._run("SELECT avg(completion_tokens) FROM rollouts WHERE student_key = ? AND status = 'ok'",
                     [student_key])
    return None if not row or row[0][0] is None else float(row[0][0])


# --- judge -----------------------------------------------------------------------------------------


def judge_selection(store: Store, key: str, limit: int | None) -> list[tuple[str, str, str | None]]:
    """(trace_id, dataset, stored status for `key` or None) in the stable order, the first `limit`
    traces of each (teacher, dataset) when limited."""
    qualify = "" if limit is None else ("QUALIFY row_number() OVER (PARTITION BY t.teacher, t.dataset "
                                        "ORDER BY t.problem_id, t.trace_id) <= ?")
    params: list[Any] = [key] + ([] if limit is None else [limit])
    return [(a, b, c) for a, b, c in store._run(
        "SELECT t.trace_id, t.dataset, r.status FROM traces t "
        "LEFT JOIN judge_results r ON r.trace_id = t.trace_id AND r.judge_key = ? "
        f"{qualify} ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id",
        params,
    )]


def judge_inputs(store: Store, trace_ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """trace_id -> (dataset, reasoning, question) for the judge's requests."""
    rows = store._with_ids(
        trace_ids,
        "SELECT t.trace_id, t.dataset, t.reasoning, coalesce(p.question, '') FROM traces t "
        "JOIN _ids USING (trace_id) "
        "LEFT JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id",
    )
    return {tid: (ds, text, q) for tid, ds, text, q in rows}


def judge_batches(store: Store, key: str, state: str) -> list[tuple[str, str]]:
    """(batch_name, trace_ids JSON) of this judge key's batches in `state`, oldest first."""
    return [(a, b) for a, b in store._run(
        "SELECT batch_name, trace_ids FROM judge_batches WHERE judge_key = ? AND state = ? "
        "ORDER BY submitted_at, batch_name",
        [key, state],
    )]


def judged_trace_ids(store: Store, key: str, trace_ids: Sequence[str]) -> set[str]:
    """The traces among `trace_ids` with a result for `key` that is not `failed`."""
    return {t for (t,) in store._run(
        "SELECT trace_id FROM judge_results WHERE judge_key = ? AND status <> 'failed' "
        "AND list_contains(?, trace_id)",
        [key, list(trace_ids)],
    )}


def judge_keys_for(store: Store, trace_ids: Sequence[str]) -> list[tuple[str, str, str, int]]:
    """(judge_key, judge, model, n ok results) of every judge with ok results for these traces."""
    return [(a, b, c, int(d)) for a, b, c, d in store._run(
        "SELECT judge_key, any_value(judge), any_value(model), count(*) FROM judge_results "
        "WHERE status = 'ok' AND list_contains(?, trace_id) GROUP BY judge_key ORDER BY judge_key",
        [list(trace_ids)],
    )]


def judge_flagged_steps(store: Store, key: str, trace_ids: Sequence[str]) -> dict[str, tuple[str | None, int]]:
    """trace_id -> (flagged_steps JSON, the trace's step count m) of `key`'s ok results."""
    return {t: (f, int(m)) for t, f, m in store._run(
        "SELECT trace_id, flagged_steps, m FROM judge_results WHERE status = 'ok' AND judge_key = ? "
        "AND list_contains(?, trace_id)",
        [key, list(trace_ids)],
    )}


def trace_datasets(store: Store, trace_ids: Sequence[str]) -> dict[str, str]:
    return {t: d for t, d in store._run(
        "SELECT trace_id, dataset FROM traces WHERE list_contains(?, trace_id)", [list(trace_ids)])}


# --- quality, reward models, monitorability, generation ------------------------------------------------


def traces_missing_quality(store: Store, metric: str, params: str, version: str,
                           datasets: Sequence[str] | None) -> pl.DataFrame:
    """(trace_id, dataset, reasoning, answer_text, question) of the traces without a usable row of
    `metric` (an 'unavailable' row is not usable: it is replaced once the model is installed)."""
    sql = (
        "SELECT t.trace_id, t.dataset, t.reasoning, t.answer_text, p.question FROM traces t "
        "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
        "WHERE NOT EXISTS (SELECT 1 FROM trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? "
        "AND x.params = ? AND x.code_version = ? AND x.status <> 'unavailable')"
    )
    args: list[Any] = [metric, params, version]
    if datasets is not None:
        sql += " AND list_contains(?, t.dataset)"
        args.append(list(datasets))
    return store._query(sql + " ORDER BY t.trace_id", args)


def traces_to_score(store: Store, metric: str, params: str, version: str, limit: int | None) -> list[tuple[Any, ...]]:
    """(trace_id, question, reasoning, answer_text) of traces with no 'ok'/'no_steps' row for this RM."""
    frame = store._query(
        "SELECT t.trace_id, p.question, t.reasoning, t.answer_text FROM traces t "
        "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
        "WHERE NOT EXISTS (SELECT 1 FROM trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? "
        "AND x.params = ? AND x.code_version = ? AND x.status IN ('ok', 'no_steps')) ORDER BY t.trace_id"
        + (" LIMIT ?" if limit is not None else ""),
        [metric, params, version, *([limit] if limit is not None else [])],
    )
    return list(frame.iter_rows())


def monitor_item_keys(store: Store, supervisor_key: str) -> set[str]:
    return {r[0] for r in store._run("SELECT item_key FROM monitor_results WHERE supervisor_key = ?",
                                     [supervisor_key])}


def cached_generations(store: Store, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """cache_key -> stored generation row, for the keys that have one."""
    import pyarrow as pa

    if not keys:
        return {}
    with store._bound("_keys", pa.table({"cache_key": list(keys)})):
        rows = store._query("SELECT g.* FROM generations g JOIN _keys USING (cache_key)").to_dicts()
    return {r["cache_key"]: r for r in rows}
