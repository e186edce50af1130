"""The DuckDB store: the one module that knows the schema and writes SQL.

Every artifact is keyed by content (primary keys), and every write is `INSERT OR IGNORE`, so a rerun
never duplicates and a crash between two writes never leaves a half row. Bulk writes go through Arrow
tables (`INSERT ... SELECT * FROM arrow_table`), never `executemany`, which is ~1000x slower.
Trace text only ever reaches SQL as a parameter or inside an Arrow table, never in the SQL string.

DuckDB allows one process per file: only the driver process opens the store; workers return rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS problems (
    dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, question VARCHAR NOT NULL,
    gold VARCHAR NOT NULL, choices VARCHAR, meta VARCHAR,
    PRIMARY KEY (dataset, problem_id));
CREATE TABLE IF NOT EXISTS traces (
    trace_id VARCHAR PRIMARY KEY, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    problem_id VARCHAR NOT NULL, reasoning VARCHAR NOT NULL, answer_text VARCHAR NOT NULL,
    truncated BOOLEAN NOT NULL, source_correct BOOLEAN, source_file VARCHAR, source_line INTEGER,
    provenance VARCHAR, ingested_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS grades (
    trace_id VARCHAR NOT NULL, grader VARCHAR NOT NULL, extracted VARCHAR, correct BOOLEAN NOT NULL,
    status VARCHAR NOT NULL, groups_correct INTEGER,
    PRIMARY KEY (trace_id, grader));
CREATE TABLE IF NOT EXISTS steps (
    trace_id VARCHAR NOT NULL, segmenter VARCHAR NOT NULL, idx INTEGER NOT NULL,
    start_char INTEGER NOT NULL, end_char INTEGER NOT NULL,
    PRIMARY KEY (trace_id, segmenter, idx));
CREATE TABLE IF NOT EXISTS step_counts (
    trace_id VARCHAR NOT NULL, segmenter VARCHAR NOT NULL, m INTEGER NOT NULL,
    PRIMARY KEY (trace_id, segmenter));
CREATE TABLE IF NOT EXISTS step_similarity (
    trace_id VARCHAR NOT NULL, model VARCHAR NOT NULL, segmenter VARCHAR NOT NULL,
    idx INTEGER NOT NULL, max_prev_cos DOUBLE NOT NULL,
    PRIMARY KEY (trace_id, model, segmenter, idx));
CREATE TABLE IF NOT EXISTS trace_metrics (
    trace_id VARCHAR NOT NULL, metric VARCHAR NOT NULL, params VARCHAR NOT NULL,
    code_version VARCHAR NOT NULL, value DOUBLE, method VARCHAR, status VARCHAR NOT NULL,
    detail VARCHAR,
    PRIMARY KEY (trace_id, metric, params, code_version));
CREATE TABLE IF NOT EXISTS students (
    student_key VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, model VARCHAR NOT NULL,
    decoding VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, profile VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    trace_id VARCHAR NOT NULL, student_key VARCHAR NOT NULL, k INTEGER NOT NULL,
    sample INTEGER NOT NULL, m INTEGER NOT NULL, bin INTEGER NOT NULL, status VARCHAR NOT NULL,
    correct BOOLEAN, forced BOOLEAN NOT NULL, extracted VARCHAR, grade_status VARCHAR,
    continuation VARCHAR, forced_continuation VARCHAR, prompt_tokens INTEGER,
    completion_tokens INTEGER, prefill_computed INTEGER, prefill_cached INTEGER,
    finish_reason VARCHAR, created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (trace_id, student_key, k, sample));
CREATE TABLE IF NOT EXISTS judge_results (
    trace_id VARCHAR NOT NULL, judge_key VARCHAR NOT NULL, judge VARCHAR NOT NULL,
    model VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, status VARCHAR NOT NULL,
    m INTEGER NOT NULL, flagged_steps VARCHAR, fraction DOUBLE, backtracking_detected BOOLEAN,
    confidence DOUBLE, final_answer VARCHAR, raw_json VARCHAR, reason VARCHAR,
    dropped_out_of_range INTEGER, retries INTEGER, input_tokens INTEGER, output_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (trace_id, judge_key));
CREATE TABLE IF NOT EXISTS generations (
    cache_key VARCHAR PRIMARY KEY, model VARCHAR NOT NULL, teacher VARCHAR NOT NULL,
    dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, prompt_hash VARCHAR NOT NULL,
    decoding VARCHAR NOT NULL, text VARCHAR NOT NULL, reasoning_content VARCHAR,
    finish_reason VARCHAR NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS monitor_results (
    item_key VARCHAR PRIMARY KEY, supervisor_key VARCHAR NOT NULL, supervisor VARCHAR NOT NULL,
    trace_id VARCHAR NOT NULL, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    problem_id VARCHAR NOT NULL, condition VARCHAR NOT NULL, label_incorrect BOOLEAN NOT NULL,
    predicted_incorrect BOOLEAN, status VARCHAR NOT NULL, sabotage_kind VARCHAR, sabotage_step INTEGER,
    detail VARCHAR, response VARCHAR, prompt_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS judge_batches (
    batch_name VARCHAR PRIMARY KEY, judge_key VARCHAR NOT NULL, trace_ids VARCHAR NOT NULL,
    state VARCHAR NOT NULL, submitted_at TIMESTAMP DEFAULT current_timestamp);
"""


@dataclass(frozen=True, slots=True)
class InsertCounts:
    offered: int
    inserted: int


class Store:
    """A DuckDB file holding problems, traces, steps, grades and every metric row."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        import duckdb

        self.path = Path(path)
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con: duckdb.DuckDBPyConnection = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.IOException as e:
            raise StoreLocked(
                f"cannot open {self.path}: {e}. DuckDB allows one process per file; "
                "stop the other legival process using it (or use another --db)."
            ) from e
        if not read_only:
            self.run(_SCHEMA)
            self.run("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the store is left exactly as it was."""
        self.run("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.run("ROLLBACK")
            raise
        self.run("COMMIT")

    @contextmanager
    def bound(self, name: str, data: Any) -> Iterator[None]:
        """Expose an Arrow table (or polars frame) to SQL as view `name` for the duration of a block.
        Unregistering inside an aborted transaction fails; that must not hide the original error
        (the next `register` of the same name replaces the view anyway)."""
        import duckdb

        self.con.register(name, data)
        try:
            yield
        finally:
            with suppress(duckdb.Error):
                self.con.unregister(name)

    def run(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Execute a statement and drain its result (DuckDB 2 refuses new work on a connection
        while a result is pending)."""
        return self.con.execute(sql, list(params or [])).fetchall()

    # -- generic bulk insert ------------------------------------------------------------------

    def insert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> InsertCounts:
        """Insert dict rows (keys = column names) idempotently; returns how many were new."""
        if not rows:
            return InsertCounts(0, 0)
        import pyarrow as pa

        return self.insert_arrow(table, pa.Table.from_pylist(list(rows)))

    def insert_arrow(self, table: str, data: pa.Table) -> InsertCounts:
        if table not in _TABLES:
            raise ValueError(f"unknown table {table!r}")
        cols = ", ".join(data.column_names)
        before = self.count(table)
        with self.bound("_incoming", data):
            self.run(f"INSERT OR IGNORE INTO {table} ({cols}) SELECT {cols} FROM _incoming")
        return InsertCounts(data.num_rows, self.count(table) - before)

    def count(self, table: str) -> int:
        if table not in _TABLES:
            raise ValueError(f"unknown table {table!r}")
        return int(self.run(f"SELECT count(*) FROM {table}")[0][0])

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """A read query as a polars frame (parameters bound, never formatted into the SQL)."""
        import polars as pl

        table = self.con.sql(sql, params=list(params or [])).to_arrow_table()
        return pl.from_arrow(table)  # type: ignore[return-value]

    # -- reads used by the stages -------------------------------------------------------------

    def existing_trace_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        return {r[0] for r in self.with_ids(ids, "SELECT t.trace_id FROM traces t JOIN _ids USING (trace_id)")}

    def traces_missing_steps(self, segmenter: str) -> pl.DataFrame:
        return self.query(
            "SELECT t.trace_id, t.reasoning FROM traces t "
            "WHERE NOT EXISTS (SELECT 1 FROM step_counts c WHERE c.trace_id = t.trace_id "
            "AND c.segmenter = ?) ORDER BY t.trace_id",
            [segmenter],
        )

    def traces_missing_metric(self, metric: str, params: str, code_version: str) -> pl.DataFrame:
        return self.query(
            "SELECT t.trace_id, t.reasoning FROM traces t WHERE NOT EXISTS (SELECT 1 FROM "
            "trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? AND x.params = ? "
            "AND x.code_version = ?) ORDER BY t.trace_id",
            [metric, params, code_version],
        )

    def step_spans(self, trace_ids: Sequence[str], segmenter: str) -> dict[str, list[tuple[int, int]]]:
        """trace_id -> [(start, end), ...] in step order (traces with no steps map to [])."""
        out: dict[str, list[tuple[int, int]]] = {t: [] for t in trace_ids}
        rows = self.with_ids(
            trace_ids,
            "SELECT s.trace_id, s.start_char, s.end_char FROM steps s JOIN _ids USING (trace_id) "
            "WHERE s.segmenter = ? ORDER BY s.trace_id, s.idx",
            [segmenter],
        )
        for tid, a, b in rows:
            out[tid].append((a, b))
        return out

    def max_prev_similarities(
        self, trace_ids: Sequence[str], model: str, segmenter: str
    ) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        rows = self.with_ids(
            trace_ids,
            "SELECT s.trace_id, s.max_prev_cos FROM step_similarity s JOIN _ids USING (trace_id) "
            "WHERE s.model = ? AND s.segmenter = ? ORDER BY s.trace_id, s.idx",
            [model, segmenter],
        )
        for tid, r in rows:
            out.setdefault(tid, []).append(float(r))
        return out

    def with_ids(self, trace_ids: Sequence[str], sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run `sql` with the view `_ids(trace_id)` bound to `trace_ids` (a join, not an IN list)."""
        import pyarrow as pa

        if not trace_ids:
            return []
        with self.bound("_ids", pa.table({"trace_id": list(trace_ids)})):
            return self.run(sql, params)

    def rows_by_key(self, table: str, key: str, values: Sequence[str]) -> list[dict[str, Any]]:
        """Rows of `table` whose `key` column is in `values` (joined, never formatted into SQL)."""
        import pyarrow as pa

        if table not in _TABLES or not key.isidentifier():
            raise ValueError(f"unknown table or column {table}.{key}")
        with self.bound("_keys", pa.table({key: list(values)})):
            return self.query(f"SELECT t.* FROM {table} t JOIN _keys USING ({key})").to_dicts()

    def stored_rollout_depths(self, student_key: str, trace_ids: Sequence[str]) -> set[tuple[str, int]]:
        rows = self.with_ids(
            trace_ids,
            "SELECT r.trace_id, r.k FROM rollouts r JOIN _ids USING (trace_id) WHERE r.student_key = ? AND r.sample = 0",
            [student_key],
        )
        return {(a, int(b)) for a, b in rows}

    def correct_traces_with_steps(
        self, graders: pl.DataFrame, segmenter: str, teacher: str | None, dataset: str | None
    ) -> pl.DataFrame:
        """Complete traces graded correct by the current grader of their dataset, with their step
        count m, question and gold, in the stable order (teacher, dataset, problem_id, trace_id);
        `rn` numbers them within (teacher, dataset)."""
        with self.bound("_graders", graders.to_arrow()):
            return self.query(
                """
                SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, c.m,
                       p.question, p.gold, p.choices,
                       row_number() OVER (PARTITION BY t.teacher, t.dataset ORDER BY t.problem_id, t.trace_id) AS rn
                FROM traces t
                JOIN _graders cg ON cg.dataset = t.dataset
                JOIN grades g ON g.trace_id = t.trace_id AND g.grader = cg.grader AND g.correct
                JOIN step_counts c ON c.trace_id = t.trace_id AND c.segmenter = ?
                JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
                WHERE NOT t.truncated AND (? IS NULL OR t.teacher = ?) AND (? IS NULL OR t.dataset = ?)
                ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id
                """,
                [segmenter, teacher, teacher, dataset, dataset],
            )


_TABLES = {
    "meta",
    "problems",
    "traces",
    "grades",
    "steps",
    "step_counts",
    "step_similarity",
    "trace_metrics",
    "students",
    "rollouts",
    "judge_results",
    "judge_batches",
    "generations",
    "monitor_results",
}


class StoreLocked(RuntimeError):
    pass
