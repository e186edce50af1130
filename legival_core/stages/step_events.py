"""The step_events stage (issue 41, docs/step_events.md): the step events of every (trace, student) pair with
rollouts, stored in `step_events` so that the report and the dashboard read them without recomputing.

`plan` asks the store, in one set-based query (`store.step_events.pair_keys`), which pairs' inputs changed
since their events were written (new or deleted rollouts, a new judge result or lexical row, similarity
rows, a new code version: their inputs key differs) and reads the inputs of those traces only; nothing
is recomputed when nothing changed. A pair with fewer than two observed depths has no event (a pair
whose stored events lost their rollouts is planned to remove them). One unit is one trace with its
planned pairs; `run` computes a chunk of traces at once (`transfer.step_events`: vectorised, no Python loop
per event); `commit` replaces the chunk's pairs' events in one transaction.

The plan reads the traces' text a batch at a time and keeps only what the events need from it: each
step's self-check cue and the few steps that hold the gold answer (their text, which `run` gives to the
grader). A unit carrying its whole text would hold the 0.8 GB of the paper-scale store's reasoning in
memory at once (docs/step_events.md, "Cost").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.metrics.redundancy import similarity_model
from legival_core.run_config import Efficiency
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.base import Executor, Plan, StoreAccess, Work, run_stage
from legival_core.stages.registered import Job, RunContext, register_stage, stage_jobs
from legival_core.store import Store
from legival_core.store import step_events as step_rows
from legival_core.transfer.step_events import (
    CODE_VERSION,
    answer_defined,
    first_stated,
    gold_candidates,
    segment_events,
    self_check_flags,
)

if TYPE_CHECKING:
    import numpy as np
    import polars as pl


@dataclass(slots=True)
class StepEventsSummary:
    traces: int = 0
    pairs: int = 0
    events: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True, eq=False)
class StepEventsUnit:
    """One trace and its planned (student) pairs, with everything their events are computed from.

    Steps: `idx`, `max_cos` (r_i, NaN where none), `self_check` (a cue in the step); `flags` the step
    numbers the backtracking `method` flagged (no method: None, and no flags); `answer_defined` and
    `candidates` ((step, text) of the steps where the gold occurs as a token: `transfer.step_events`).
    Depths: one entry per (student, k) of the planned pairs: `d_student` (index into `students`),
    `d_k`, `d_y` (NaN: not observed), `d_prompt` (NaN: not counted). `keys[i]` is the inputs key of
    pair `students[i]` (None: it has no rollouts left); `replaces`: some pair has stored events."""

    trace_id: str
    dataset: str
    gold: str | None
    m: int
    method: str | None
    flags: tuple[int, ...]
    has_similarity: bool
    idx: np.ndarray
    max_cos: np.ndarray
    self_check: np.ndarray
    answer_defined: bool
    candidates: tuple[tuple[int, str], ...]
    students: tuple[str, ...]
    keys: tuple[str | None, ...]
    d_student: np.ndarray
    d_k: np.ndarray
    d_y: np.ndarray
    d_prompt: np.ndarray
    replaces: bool


@dataclass(frozen=True, slots=True)
class StepEventsResult:
    """A trace's pairs (to replace) and, on the chunk's first result, the whole chunk's events (a
    chunk commits as one batch: one Arrow table, not one per trace)."""

    trace_id: str
    students: tuple[str, ...]
    replaces: bool
    events: Any = None


@dataclass(frozen=True, slots=True)
class StepEventsStage:
    """Store the step events of the (trace, student) pairs whose inputs changed (module docstring)."""

    config: Efficiency = field(default_factory=Efficiency)
    chunk: int = 2000
    """Traces per chunk: the unit of the vectorised computation and of a commit."""
    text_batch: int = 10_000
    """Traces whose text the plan reads together."""
    name: str = "step_events"

    @property
    def code_version(self) -> str:
        return CODE_VERSION

    def salt(self) -> str:
        """What the events depend on beside the rows `pair_keys` hashes: part of every inputs key."""
        return f"steps-{CODE_VERSION}|{SEGMENTER_VERSION}|{similarity_model(self.config)}"

    def plan(self, store: Store) -> Plan[StepEventsUnit, StepEventsSummary]:
        import polars as pl

        keys = step_rows.pair_keys(store, similarity_model(self.config), SEGMENTER_VERSION, BACKTRACKING.name,
                                   self.salt())
        eligible = pl.col("n_observed").fill_null(0) >= 2
        stale = pl.col("stored_key").is_null() | (pl.col("stored_key") != pl.col("inputs_key"))
        todo = keys.filter((eligible & stale) | (~eligible & pl.col("stored_key").is_not_null()))
        planned = todo["trace_id"].unique()
        done = keys.filter(eligible & ~pl.col("trace_id").is_in(planned.implode()))["trace_id"].n_unique()
        if todo.height == 0:
            return Plan([], StepEventsSummary(), total=done, done=done)
        # traces numbered in storage order: a batch of texts is then one stretch of the table
        traces = (todo.group_by("trace_id").agg(pl.col("trace_row").min()).sort("trace_row", "trace_id")
                  .with_row_index("tix").with_columns(pl.col("tix").cast(pl.Int64)))
        pairs = todo.drop("trace_row").join(traces, on="trace_id").sort("tix", "student_key").with_columns(
            pl.int_range(pl.len()).over("tix").cast(pl.Int32).alias("si"))
        inputs = step_rows.step_inputs(store, traces, pairs, similarity_model(self.config), SEGMENTER_VERSION,
                                       BACKTRACKING.name)
        units = _units(inputs, pairs, lambda batch: step_rows.trace_texts(store, batch), self.text_batch)
        return Plan(units, StepEventsSummary(), total=len(units) + done, done=done)

    def run(self, units: Sequence[StepEventsUnit], executor: Executor) -> Iterator[list[StepEventsResult]]:
        return executor.run(Work(_no_worker, _step_events_chunk, self.chunk), units)

    def commit(self, store: Store, results: Sequence[StepEventsResult], plan: Plan[Any, StepEventsSummary]) -> int:
        import polars as pl

        pairs = pl.DataFrame({"trace_id": [r.trace_id for r in results for _ in r.students],
                              "student_key": [s for r in results for s in r.students]},
                             schema={"trace_id": pl.Utf8, "student_key": pl.Utf8})
        tables = [r.events for r in results if r.events is not None]
        if tables:
            import pyarrow as pa

            events = pa.concat_tables(tables)
        else:
            events = pl.DataFrame(schema=_arrow_schema_frame().schema).to_arrow()
        inserted = step_rows.replace_step_events(store, pairs, events, delete=any(r.replaces for r in results))
        s = plan.summary
        s.traces += len(results)
        s.pairs += pairs.height
        s.events += inserted
        return len(results)


def _arrow_schema_frame() -> pl.DataFrame:
    import polars as pl

    from legival_core.transfer.step_events import event_schema

    return pl.DataFrame(schema={**event_schema(), "inputs_key": pl.Utf8(), "code_version": pl.Utf8()})


def _no_worker() -> None:
    return None


def _units(inputs: step_rows.StepInputs, pairs: pl.DataFrame, texts: Callable[[pl.DataFrame], pl.DataFrame],
           batch: int) -> list[StepEventsUnit]:
    """Cut the plan's columnar inputs into one unit per trace (views of the same arrays), reading the
    texts `batch` traces at a time for their steps' cues and gold candidates. `pairs` are the planned
    pairs by (tix, si): `si` numbers a trace's students in `student_key` order."""
    import numpy as np
    import polars as pl

    meta = inputs.traces
    n = meta.height
    flags = meta["flags"].str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64)).to_list()
    tid, dataset, gold, m, method, n_sim = (meta[c].to_list() for c in (
        "trace_id", "dataset", "gold", "m", "backtracking_method", "n_sim"))
    trace_row = meta["trace_row"]
    defined = answer_defined(dataset, gold)
    st = inputs.steps
    s_cut = np.searchsorted(st["tix"].to_numpy(), np.arange(n + 1))
    idx = st["idx"].cast(pl.Int32).to_numpy()
    starts, ends = st["start_char"].to_numpy(), st["end_char"].to_numpy()
    cos = st["max_cos"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    self_check = np.zeros(st.height, bool)
    candidates: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        text = texts(pl.DataFrame({"trace_id": tid[lo:hi], "tix": np.arange(lo, hi),
                                   "trace_row": trace_row[lo:hi]}))["reasoning"].to_list()
        a, b = s_cut[lo], s_cut[hi]
        rows = np.repeat(np.arange(hi - lo), np.diff(s_cut[lo:hi + 1]))
        step_text = pl.Series("text", [text[r][x:y] for r, x, y in zip(
            rows.tolist(), starts[a:b].tolist(), ends[a:b].tolist(), strict=True)], dtype=pl.Utf8)
        del text
        self_check[a:b] = self_check_flags(step_text)
        hits = np.flatnonzero(gold_candidates(step_text, rows, gold[lo:hi], defined[lo:hi]))
        for i, found in zip(hits.tolist(), step_text.gather(hits).to_list(), strict=True):
            candidates[lo + int(rows[i])].append((int(idx[a + i]), found))
        del step_text
    dp = inputs.depths
    d_cut = np.searchsorted(dp["tix"].to_numpy(), np.arange(n + 1))
    d_student = dp["si"].cast(pl.Int32).to_numpy()
    d_k = dp["k"].cast(pl.Int32).to_numpy()
    d_y = dp["y"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    d_prompt = dp["prompt_tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    by_trace = pairs.group_by("tix", maintain_order=True).agg(
        "student_key", "inputs_key", pl.col("stored_key").is_not_null().any().alias("replaces"))
    planned = {r[0]: r for r in by_trace.iter_rows()}
    units = []
    for t in range(n):
        _, students, keys, replaces = planned[t]
        a, b = d_cut[t], d_cut[t + 1]
        sa, sb = s_cut[t], s_cut[t + 1]
        units.append(StepEventsUnit(
            tid[t], dataset[t], gold[t], int(m[t] or 0), method[t],
            tuple(flags[t] or ()) if method[t] is not None else (), bool(n_sim[t]), idx[sa:sb], cos[sa:sb],
            self_check[sa:sb], bool(defined[t]), tuple(candidates[t]), tuple(students), tuple(keys),
            d_student[a:b], d_k[a:b], d_y[a:b], d_prompt[a:b], bool(replaces)))
    return units


def _step_events_chunk(_w: None, units: Sequence[StepEventsUnit]) -> list[StepEventsResult]:
    """The events of a chunk of traces: the grader on each trace's gold candidates, then
    `segment_events` over all its pairs together."""
    import numpy as np
    import polars as pl

    if not units:
        return []
    n_steps = np.array([len(u.idx) for u in units], np.int64)
    step_row = np.repeat(np.arange(len(units)), n_steps)
    step_idx = np.concatenate([u.idx for u in units]).astype(np.int64)
    cand = [(r, i, text) for r, u in enumerate(units) for i, text in u.candidates]
    first = first_stated(np.array([c[0] for c in cand], np.int64), np.array([c[1] for c in cand], np.int64),
                         [c[2] for c in cand], [u.dataset for u in units], [u.gold for u in units])
    width = int(max(u.m for u in units)) + 1
    flagged = np.array([r * width + f for r, u in enumerate(units) for f in u.flags], np.int64)
    steps = pl.DataFrame({
        "tix": step_row, "idx": step_idx, "backtracking": np.isin(step_row * width + step_idx, flagged),
        "max_cos": pl.Series(np.concatenate([u.max_cos for u in units]), nan_to_null=True),
        "self_check": np.concatenate([u.self_check for u in units])})
    traces = pl.DataFrame({
        "tix": np.arange(len(units)), "trace_id": [u.trace_id for u in units], "m": [u.m for u in units],
        "backtracking_method": pl.Series([u.method for u in units], dtype=pl.Utf8),
        "has_similarity": [u.has_similarity for u in units], "answer_defined": [u.answer_defined for u in units],
        "answer_first": first})
    n_depths = np.array([len(u.d_k) for u in units], np.int64)
    depths = pl.DataFrame({
        "tix": np.repeat(np.arange(len(units)), n_depths),
        "student_key": [u.students[i] for u in units for i in u.d_student.tolist()],
        "k": np.concatenate([u.d_k for u in units]),
        "y": pl.Series(np.concatenate([u.d_y for u in units]), nan_to_null=True),
        "prompt_tokens": pl.Series(np.concatenate([u.d_prompt for u in units]), nan_to_null=True)},
        schema_overrides={"student_key": pl.Utf8})
    keys = pl.DataFrame({"trace_id": [u.trace_id for u in units for _ in u.students],
                         "student_key": [s for u in units for s in u.students],
                         "inputs_key": [k for u in units for k in u.keys]},
                        schema={"trace_id": pl.Utf8, "student_key": pl.Utf8, "inputs_key": pl.Utf8})
    events = (segment_events(depths, steps, traces).join(keys, on=["trace_id", "student_key"], how="left")
              .with_columns(pl.lit(CODE_VERSION, pl.Utf8).alias("code_version")))
    table = events.to_arrow(compat_level=pl.CompatLevel.oldest())
    return [StepEventsResult(u.trace_id, u.students, u.replaces, table if i == 0 else None) for i, u in enumerate(units)]


def compute_step_events(store: Store | StoreAccess, config: Efficiency | None = None, executor: Executor | None = None,
                  progress: Any = None) -> StepEventsSummary:
    """The step events of every pair whose inputs changed: what `legival step-events` and a run's step_events job run."""
    return run_stage(StepEventsStage(config or Efficiency()), store, executor, progress)


def _step_events_jobs(ctx: RunContext) -> list[Job]:
    """One job after transfer, efficiency and judge; none when the spec runs no transfer."""
    if not ctx.spec.transfer.enabled:
        return []
    return [stage_jobs("step_events", "step_events", [StepEventsStage(ctx.spec.efficiency)])]


register_stage("step_events", "legival step-events --db DB", needs=("transfer", "efficiency", "judge"), requires=("segment",),
               build=_step_events_jobs, order=75, partial_inputs=True,  # a failed judge: the lexical flags, replanned later
               description="step events: each segment between two rollout depths, its outcome and its steps' "
                           "features (docs/step_events.md)")
