"""Hint interventions in the store (docs/monitorability.md): the sampled traces of each arm
(`intervention_traces`, apart from the benchmark's `traces`) and the monitors' verdicts on them
(`hint_verdicts`). Writes are idempotent inserts keyed by content (a rerun generates and asks nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


def stored_keys(store: Store, table: str, column: str, keys: Sequence[str]) -> set[str]:
    """The `keys` already stored in `table`'s key `column` (intervention_traces.unit_key,
    hint_verdicts.verdict_key)."""
    import polars as pl

    assert (table, column) in (("intervention_traces", "unit_key"), ("hint_verdicts", "verdict_key"))
    if not keys or not store.has_table(table):
        return set()
    with store._bound("_keys", pl.DataFrame({"k": list(keys)}, schema={"k": pl.Utf8}).to_arrow()):
        return {r[0] for r in store._run(f"SELECT t.{column} FROM {table} t JOIN _keys k ON k.k = t.{column}")}


def intervention_rows(store: Store, teachers: Sequence[str] | None = None) -> pl.DataFrame:
    """Every stored intervention trace (of `teachers` when given): what the monitors read."""
    return store._query(
        "SELECT unit_key, teacher, dataset, problem_id, cue, arm, sample, target, question, reasoning, answer_text "
        "FROM intervention_traces WHERE (? IS NULL OR list_contains(?, teacher)) ORDER BY unit_key",
        [None if teachers is None else list(teachers), None if teachers is None else list(teachers)])


def xyz_rows(store: Store) -> pl.DataFrame:
    """One row per verdict with its trace: instance (teacher|dataset|problem_id), teacher, dataset, cue,
    monitor, scope, x (the arm), y (the answer is the hint's target), z (the verdict; null: unparsed),
    status; the unhinted arm's rows carry the cue they were read for."""
    import polars as pl

    if not store.has_table("hint_verdicts"):
        return pl.DataFrame(schema={"instance": pl.Utf8, "teacher": pl.Utf8, "dataset": pl.Utf8, "cue": pl.Utf8,
                                    "monitor": pl.Utf8, "scope": pl.Utf8, "x": pl.Int64, "y": pl.Int64,
                                    "z": pl.Int64, "status": pl.Utf8})
    return store._query(
        """
        SELECT t.teacher || '|' || t.dataset || '|' || t.problem_id AS instance, t.teacher, t.dataset, v.cue,
               v.monitor, v.scope, t.arm::BIGINT AS x, t.hit_target::BIGINT AS y, v.verdict::BIGINT AS z, v.status
        FROM hint_verdicts v JOIN intervention_traces t ON t.unit_key = v.unit_key
        ORDER BY instance, v.cue, v.monitor, v.scope, x, t.sample
        """)


def intervention_counts(store: Store) -> pl.DataFrame:
    """Per (teacher, dataset, cue, arm): samples, answers equal to the target, and correct answers."""
    return store._query(
        "SELECT teacher, dataset, cue, arm, count(*)::BIGINT AS samples, count(*) FILTER (WHERE hit_target)::BIGINT "
        "AS hit_target, count(*) FILTER (WHERE correct)::BIGINT AS correct FROM intervention_traces "
        "GROUP BY ALL ORDER BY ALL")


def planned_counts(store: Store, teacher: str, dataset: str, problem_ids: Sequence[str], decoding: str,
                   monitor_keys: Sequence[str]) -> tuple[int, dict[str, int], float | None]:
    """What `legival plan` needs of one (teacher, dataset): the samples stored for `problem_ids` with this
    `decoding`, the verdicts stored on them per monitor key, and their mean reasoning + answer characters
    (None when none is stored)."""
    if not problem_ids or not store.has_table("intervention_traces"):
        return 0, dict.fromkeys(monitor_keys, 0), None
    where = "teacher = ? AND dataset = ? AND list_contains(?, problem_id) AND decoding = ?"
    args = [teacher, dataset, list(problem_ids), decoding]
    n, chars = store._run(f"SELECT count(*), avg(length(reasoning) + length(answer_text)) FROM intervention_traces "
                          f"WHERE {where}", args)[0]
    verdicts = dict(store._run(
        f"SELECT v.monitor_key, count(*) FROM hint_verdicts v JOIN (SELECT unit_key FROM intervention_traces "
        f"WHERE {where}) t ON t.unit_key = v.unit_key WHERE list_contains(?, v.monitor_key) GROUP BY 1",
        [*args, list(monitor_keys)]))
    return int(n), {k: int(verdicts.get(k, 0)) for k in monitor_keys}, None if chars is None else float(chars)


def verdict_pairs(store: Store) -> pl.DataFrame:
    """Two monitors' parsed verdicts on the same sample, cue and scope (monitor_a < monitor_b): teacher,
    cue, scope, monitor_a, monitor_b, a, b (booleans); what agreement.csv compares."""
    import polars as pl

    if not store.has_table("hint_verdicts"):
        return pl.DataFrame(schema={"teacher": pl.Utf8, "cue": pl.Utf8, "scope": pl.Utf8, "monitor_a": pl.Utf8,
                                    "monitor_b": pl.Utf8, "a": pl.Boolean, "b": pl.Boolean})
    return store._query(
        """
        SELECT t.teacher, x.cue, x.scope, x.monitor AS monitor_a, y.monitor AS monitor_b, x.verdict AS a,
               y.verdict AS b
        FROM hint_verdicts x JOIN hint_verdicts y
          ON y.unit_key = x.unit_key AND y.cue = x.cue AND y.scope = x.scope AND x.monitor < y.monitor
        JOIN intervention_traces t ON t.unit_key = x.unit_key
        WHERE x.verdict IS NOT NULL AND y.verdict IS NOT NULL
        ORDER BY monitor_a, monitor_b, t.teacher, x.cue, x.scope, x.unit_key
        """)


def monitor_names(store: Store) -> list[str]:
    """The monitors with a stored verdict, sorted."""
    if not store.has_table("hint_verdicts"):
        return []
    return [r[0] for r in store._run("SELECT DISTINCT monitor FROM hint_verdicts ORDER BY 1")]
