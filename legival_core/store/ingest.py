"""The ingest stage's read model: what the store already says about a file's problems and trace ids,
and a damaged store file reported as `StoreUnreadable` instead of a DuckDB traceback.

A file may only add to the store: a problem it redefines (another question, gold or choices) or a
trace id of its own that the store holds for another trace is a conflict, reported before anything
is written (`legival_core.stages.ingest`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from legival_core.store.db import Store, _open_error


@dataclass(frozen=True, slots=True)
class StoredProblem:
    question: str
    gold: str
    choices: str | None
    """As stored: a JSON list, or None for a problem without choices."""


@dataclass(frozen=True, slots=True)
class StoredTrace:
    """The identity of a stored trace: the parts its content hash (`trace_id`) is made of."""

    trace_id: str
    teacher: str
    dataset: str
    problem_id: str
    reasoning: str
    answer_text: str


def stored_problems(store: Store, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredProblem]:
    """(dataset, problem_id) -> the stored problem, for the keys the store holds."""
    import pyarrow as pa

    if not keys:
        return {}
    data = pa.table({"dataset": [k[0] for k in keys], "problem_id": [k[1] for k in keys]},
                    schema=pa.schema([("dataset", pa.string()), ("problem_id", pa.string())]))
    with store._bound("_keys", data):
        got = store._run("SELECT p.dataset, p.problem_id, p.question, p.gold, p.choices FROM problems p "
                         "JOIN _keys USING (dataset, problem_id)")
    return {(d, pid): StoredProblem(q, g, c) for d, pid, q, g, c in got}


def traces_by_own_id(store: Store, own_ids: Sequence[str]) -> dict[str, list[StoredTrace]]:
    """The stored traces whose record carried its own `trace_id` field (kept in `provenance`), for
    each of `own_ids` the store holds."""
    rows = store._with_ids(
        list(dict.fromkeys(own_ids)),
        "SELECT o.own_id, t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text "
        "FROM traces t JOIN _own o ON json_extract_string(t.provenance, '$.trace_id') = o.own_id "
        "WHERE t.provenance IS NOT NULL AND json_valid(t.provenance) ORDER BY t.trace_id",
        name="_own", column="own_id",
    )
    out: dict[str, list[StoredTrace]] = {}
    for own, *rest in rows:
        out.setdefault(own, []).append(StoredTrace(*rest))
    return out


@contextmanager
def damaged_store_errors(store: Store) -> Iterator[None]:
    """Turn the DuckDB error a damaged store file raises on use (a truncated file can open, and fail
    only when a read reaches its missing pages) into `StoreUnreadable`; any other error passes."""
    import duckdb

    try:
        yield
    except duckdb.Error as e:
        low = str(e).lower()
        if any(m in low for m in _DAMAGE):
            raise _open_error(store.path, e) from e
        raise


_DAMAGE = ("could not read enough bytes", "corrupt", "checksum")
