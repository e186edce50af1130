"""The transfer stage: student rollouts on teacher-trace prefixes, stored in `rollouts` (SPEC section 4).

Computes only what is missing: a rollout is keyed by (trace_id, student_key, k, sample), and the
student key hashes model, decoding, prompt version and profile, so a rerun, or another backend
serving the same model, reuses every stored rollout. The stage's units are traces with their missing
depths; an executor sends them to student workers a chunk of traces at a time, all depths of a trace
together in ascending order and every trace to the same worker (prefix-cache locality), and each
finished chunk is committed: a crash loses at most the chunks in flight. `rollout_chunk` is the ONE
rollout loop, whether the executor is this process (`legival transfer`) or Ray engine actors
(`legival run`).

Two passes per rollout: greedy continuation with a first-answer stop; if no answer is extractable,
the forcing text is appended and at most `forcing_max_tokens` more are generated (`forced = true`).
A prompt that does not fit the student's context is stored with `status = 'overflow'` and takes no
part in the metrics.

Every chunk also measures what it cost: its engine seconds (the model load apart) and its work in
the cost model's units (`legival_core.transfer.cost`); a stage given a `Timing` stores one
`transfer_timings` row per committed batch, in the batch's transaction, from which `legival plan`
calibrates its time estimate.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from legival_core.backends.base import Completion, GenerationRequest, TextBackend, device_of
from legival_core.backends.lazy import LazyBackend
from legival_core.backends.stop_rules import StopRuleSpec
from legival_core.bulk import gc_paused
from legival_core.datasets.base import DatasetSpec, get_dataset
from legival_core.stages.base import Executor, Given, Plan, Work, run_stage
from legival_core.stages.transfer_timing import Timing, take_load, timing_row
from legival_core.stages.transfer_traces import TransferTrace, load_transfer_traces, transfer_rows
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.transfer.cost import EngineWork, pass_work
from legival_core.transfer.rollout_plan import (
    PROMPT_VERSION,
    PlannedRollout,
    StudentConfig,
    depth_bins,
    plan_trace,
    student_messages,
)
from legival_core.transfer.students import make_student_backend
from legival_core.types import Grade, Problem, canonical_json

if TYPE_CHECKING:
    import polars as pl

STAT_FIELDS = ("forced", "overflow", "prompt_tokens", "prefill_computed", "prefill_cached", "decode_tokens",
               "chunks", "decode_steps", "context", "compute_s", "load_s")


MIN_COMMITS = 8
"""A shard with fewer than MIN_COMMITS x traces_per_chunk traces gets smaller chunks (`shard_chunk`)."""
CHUNK_ROLLOUTS = 8
"""...but a chunk keeps about this many rollouts (half a decode batch of the embedded student)."""


@dataclass(slots=True)
class TransferSummary:
    transfer_traces: int = 0
    empty_correct_traces: int = 0
    rollouts_total: int = 0
    rollouts_cached: int = 0
    rollouts_generated: int = 0
    forced: int = 0
    overflow: int = 0
    prompt_tokens: int = 0
    """Prompt tokens of the rollouts' first pass (each row's `prompt_tokens`; `legival plan` predicts it)."""
    prefill_computed: int = 0
    prefill_cached: int = 0
    decode_tokens: int = 0
    chunks: int = 0
    decode_steps: int = 0
    """Forward passes of the engines (`legival_core.transfer.cost`: prefilled prompts and decode steps)."""
    context: int = 0
    """Tokens attended to while decoding (`cost.decode_context`, summed over the rollouts)."""
    compute_s: float = 0.0
    """Engine seconds of the chunks (each measured on its engine, the model load apart)."""
    load_s: float = 0.0
    """Engine seconds spent loading the model (in this stage's chunks, or before them when prewarmed)."""
    device: str = ""
    host: str = ""
    """The engine's device and host, as its chunks report them (the last one seen)."""
    started: float = 0.0
    """When the stage planned (epoch seconds): a shard's wall time runs from here to its last commit."""
    batches: int = 0
    """`transfer_timings` rows stored so far by this stage run."""
    load_started: float | None = None
    """When an engine of this stage started loading its model (epoch seconds; None: none loaded for it)."""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["started"], d["batches"], d["load_started"]
        d["compute_s"], d["load_s"] = round(self.compute_s, 3), round(self.load_s, 3)
        return d

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            setattr(self, k, getattr(self, k) + v)

    @property
    def work(self) -> EngineWork:
        """The cost model's view of what the engines computed."""
        return EngineWork(self.chunks, self.prefill_computed, self.decode_steps, self.decode_tokens, self.context)


Unit = tuple[TransferTrace, list[PlannedRollout]]
"""A transfer trace with its missing rollouts, ascending depth."""


@dataclass(frozen=True, slots=True)
class RolloutBatch:
    """The rows of one chunk of traces, its token accounting and cost (`STAT_FIELDS`), and the engine
    that computed it: its device, its host, and when it started loading its model (epoch seconds;
    None when the load was reported with an earlier chunk, or the backend was given)."""

    rows: list[dict[str, Any]]
    stats: dict[str, float] = field(default_factory=dict)
    device: str = ""
    host: str = ""
    load_started: float | None = None


def shard_chunk(traces: int, rollouts: int, traces_per_chunk: int, min_commits: int = MIN_COMMITS,
                min_rollouts: int = CHUNK_ROLLOUTS) -> int:
    """Traces per chunk for a shard of `traces` transfer traces and `rollouts` rollouts (its full
    plan): the fewest traces that hold about `min_rollouts` rollouts, but no fewer than the shard
    needs for `min_commits` chunks, and at most `traces_per_chunk` (at least one trace)."""
    if traces <= 0 or rollouts <= 0:
        return max(1, traces_per_chunk)
    fill = math.ceil(min_rollouts * traces / rollouts)
    return max(1, min(traces_per_chunk, max(fill, traces // max(1, min_commits))))


@dataclass(frozen=True, slots=True)
class MissingRollouts:
    """`TransferStage.missing`: the shard's counts, the rows (`transfer_rows` columns) of its traces
    with a missing depth, and trace_id -> the depths k already stored for its student."""

    summary: TransferSummary
    rows: pl.DataFrame
    done: Mapping[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TransferStage:
    """Rollouts of one student on the transfer traces (optionally of one teacher/dataset, the first
    `limit` per cell) that are not stored yet."""

    config: StudentConfig
    teacher: str | None = None
    dataset: str | None = None
    limit: int | None = None
    traces_per_chunk: int = 4
    backend: TextBackend | None = None
    """A backend the caller built and keeps (tests, benchmarks; in-process only); default: the worker
    builds the registered backend of `config`, lazily, and closes it."""
    name: str = "transfer"
    timing: Timing | None = None
    """Set: each committed batch stores its `transfer_timings` row (what the plan calibrates on)."""

    @property
    def unit_scope(self) -> str:
        """Failed units are recorded per name (`isolation.failure_stage`)."""
        return str(self.config.name)

    def plan(self, store: Store) -> Plan[Unit, TransferSummary]:
        """Select the transfer traces, register the student, and list the rollouts that are missing."""
        m = self.missing(store)
        return Plan(self.units(store, m.rows, m.done), m.summary, total=m.summary.rollouts_total,
                    done=m.summary.rollouts_cached)

    def missing(self, store: Store) -> MissingRollouts:
        """The plan's first phase, without any trace text: counts, the student registered, the rows of
        the traces with a missing depth, and the stored (trace, depth) keys. `legival plan` stops here
        for a paper-scale shard and loads a sample of the rows (`units`); it asks every shard of a
        student at once (`legival_core.plan.shards`)."""
        started = time.time()
        rows, empty = transfer_rows(store, self.teacher, self.dataset, self.limit)
        register_student(store, self.config)
        done = reads.stored_rollout_depths(store, self.config.student_key, rows["trace_id"].to_list(),
                                           self.config.rollout_table)
        return missing_rollouts(self.config, rows, empty, done, started)

    def units(self, store: Store, rows: pl.DataFrame, done: Mapping[str, frozenset[int]]) -> list[Unit]:
        """The plan's second phase: the traces of `rows` (from `missing`) with their missing rollouts."""
        return planned_units(self.config, load_transfer_traces(store, rows, self.teacher, self.dataset), done)

    def work(self) -> Work[TextBackend, Unit, RolloutBatch]:
        if self.backend is not None:
            return Work(Given(self.backend), RolloutChunk(self.config), self.traces_per_chunk, route=unit_key)
        return Work(StudentWorker(self.config), RolloutChunk(self.config), self.traces_per_chunk, route=unit_key,
                    teardown=close_backend, key=f"{self.config.student_key}:{self.config.backend}",
                    warm=load_backend, loaded=backend_loaded)

    def run(self, units: Sequence[Unit], executor: Executor) -> Iterator[list[RolloutBatch]]:
        return executor.run(self.work(), units)

    def commit(self, store: Store, results: Sequence[RolloutBatch], plan: Plan[Unit, TransferSummary]) -> int:
        """One transaction per batch: a crash never leaves part of a chunk, a rerun never duplicates."""
        rows = [r for b in results for r in b.rows]
        timing = timing_row(self.timing, self.config, self.teacher, self.dataset, results, plan.summary) \
            if self.timing is not None and results else None
        with store.transaction():
            store.insert_rows(self.config.rollout_table, rows)
            if timing is not None:
                store.insert_rows("transfer_timings", [timing])
        for b in results:
            plan.summary.add(b.stats)
            for k in ("device", "host"):
                setattr(plan.summary, k, getattr(b, k) or getattr(plan.summary, k))
            if b.load_started is not None:
                plan.summary.load_started = min(b.load_started, plan.summary.load_started or b.load_started)
        plan.summary.batches += 1 if timing is not None else 0
        plan.summary.rollouts_generated += len(rows)
        return len(rows)


def register_student(store: Store, c: StudentConfig) -> None:
    """Register the student (its key's model, decoding, prompt version, profile) unless stored:
    a plan on a read-only store (`legival plan`) skips it, and a stored key is left alone as the
    insert would (a read instead of a transaction per shard of a resume)."""
    if not store.read_only and not reads.student_stored(store, c.student_key):
        with store.transaction():
            store.insert_rows("students", [{
                "student_key": c.student_key, "name": c.name, "model": c.model,
                "decoding": canonical_json(c.decoding()), "prompt_version": PROMPT_VERSION, "profile": c.profile,
            }])


def missing_rollouts(c: StudentConfig, rows: pl.DataFrame, empty: int, done: Mapping[str, frozenset[int]],
                     started: float) -> MissingRollouts:
    """A shard's counts and its rows with a missing depth, from its transfer rows and stored depths."""
    import polars as pl

    s = TransferSummary(transfer_traces=rows.height, empty_correct_traces=empty, started=started)
    depths_of: dict[int, frozenset[int]] = {}  # the depths of a trace of m steps, per m
    need = []
    for tid, m in zip(rows["trace_id"].to_list(), rows["m"].to_list(), strict=True):
        depths = depths_of.get(m)
        if depths is None:
            depths = depths_of[m] = frozenset(k for k, _ in depth_bins(m, c))
        stored = done.get(tid)
        missing = len(depths - stored) if stored else len(depths)
        s.rollouts_total += len(depths)
        s.rollouts_cached += len(depths) - missing
        need.append(missing > 0)
    return MissingRollouts(s, rows.filter(pl.Series(need, dtype=pl.Boolean)), done)


def planned_units(c: StudentConfig, traces: Iterable[TransferTrace], done: Mapping[str, frozenset[int]]) -> list[Unit]:
    """Each trace with its rollouts not in `done` (trace id -> stored depths), ascending depth."""
    none: frozenset[int] = frozenset()
    with gc_paused():
        return [(t, plan_trace(t.trace_id, t.steps, c, done.get(t.trace_id, none))) for t in traces]


def unit_key(unit: Unit) -> str:
    return unit[0].trace_id


def close_backend(backend: TextBackend) -> None:
    backend.close()


def load_backend(backend: TextBackend) -> None:
    load = getattr(backend, "load", None)
    if load is not None:
        load()


def backend_loaded(backend: TextBackend) -> bool:
    return bool(getattr(backend, "loaded", True))


@dataclass(frozen=True, slots=True)
class StudentWorker:
    """Builds a worker's student backend, lazily: a worker that gets no unit never loads a model."""

    config: StudentConfig

    def __call__(self) -> TextBackend:
        config = self.config
        return LazyBackend(lambda: make_student_backend(config))


@dataclass(frozen=True, slots=True)
class RolloutChunk:
    config: StudentConfig

    def __call__(self, backend: TextBackend, chunk: Sequence[Unit]) -> list[RolloutBatch]:
        """One chunk on this engine, timed: the model loaded first (its load timed apart, reported by
        the first chunk after it, also when it was prewarmed), then the chunk's calls."""
        load_backend(backend)
        loaded = take_load(backend)
        s = TransferSummary()
        t0 = time.perf_counter()
        rows = rollout_chunk(backend, self.config, chunk, s)
        s.compute_s = time.perf_counter() - t0
        s.chunks = 1
        if loaded is not None:
            s.load_s = loaded[1]
        return [RolloutBatch(rows, {k: getattr(s, k) for k in STAT_FIELDS}, device_of(backend), socket.gethostname(),
                             loaded[0] if loaded is not None else None)]


def rollout_chunk(
    backend: TextBackend,
    config: StudentConfig,
    chunk: Iterable[Unit],
    summary: TransferSummary,
) -> list[dict[str, Any]]:
    """Generate, grade and (where needed) force one chunk of traces; returns rollout rows."""
    if config.mode == "early_answer":
        return early_answer_chunk(backend, config, chunk, summary)
    items: list[tuple[TransferTrace, PlannedRollout, DatasetSpec, str]] = []
    requests = []
    for t, plans in chunk:
        spec = get_dataset(t.dataset)
        for p in plans:
            prompt = backend.render_chat(student_messages(spec.system_prompt, t.problem.question, p.prefix), True)
            items.append((t, p, spec, prompt))
            requests.append(GenerationRequest(f"{t.trace_id}:{p.k}", prompt, config.max_new_tokens, t.trace_id,
                                              StopRuleSpec("first_answer", spec.name),
                                              repetition_penalty=config.repetition_penalty))
    first = backend.generate(requests)
    max_batch = getattr(backend, "max_batch", None)
    _add_work(summary, pass_work(first, max_batch))
    rows: list[dict[str, Any]] = []
    forcing: list[tuple[int, GenerationRequest]] = []
    for i, ((t, p, spec, prompt), c) in enumerate(zip(items, first, strict=True)):
        _account(summary, c)
        summary.prompt_tokens += c.prompt_tokens
        row = _row(t, p, config, c)
        if c.finish_reason == "overflow":
            summary.overflow += 1
        else:
            g = grade_continuation(spec, t.problem, p.prefix, c, config)
            _set_grade(row, g)
            if g.status == "unparsed":
                forcing.append((i, GenerationRequest(
                    f"{t.trace_id}:{p.k}:forced", prompt + c.text + spec.forcing_text, config.forcing_max_tokens,
                    t.trace_id, StopRuleSpec("first_answer", spec.name, prefix=spec.forcing_text),
                    repetition_penalty=config.repetition_penalty)))
        rows.append(row)
    if forcing:
        forced = backend.generate([r for _, r in forcing])
        _add_work(summary, pass_work(forced, max_batch))
        for (i, _), c in zip(forcing, forced, strict=True):
            t, p, spec, _prompt = items[i]
            _account(summary, c)
            summary.forced += 1
            row = rows[i]
            row["forced"] = True
            row["forced_continuation"] = c.text
            row["completion_tokens"] += c.completion_tokens
            if c.finish_reason != "overflow":
                forced_text = spec.forcing_text + c.text
                g = grade_text(spec, t.problem, forced_text, c.finish_reason == "rule")
                _set_grade(row, g)
    return rows


def early_answer_chunk(backend: TextBackend, config: StudentConfig, chunk: Iterable[Unit],
                       summary: TransferSummary) -> list[dict[str, Any]]:
    """Early answering (Lanham et al. 2023; docs/transfer.md "Early answering"): the prefix, then the
    dataset's forcing text at once, at most `forcing_max_tokens` tokens, no continuation. The row is the
    forcing pass's (`forced` true, `continuation` empty, `forced_continuation` the answer), graded as a
    forced answer is."""
    items: list[tuple[TransferTrace, PlannedRollout, DatasetSpec]] = []
    requests = []
    for t, plans in chunk:
        spec = get_dataset(t.dataset)
        for p in plans:
            prefix = p.prefix
            joint = "\n\n" if prefix and not prefix[-1].isspace() else ""  # the answer starts its own line
            prompt = backend.render_chat(student_messages(spec.system_prompt, t.problem.question, prefix), True)
            items.append((t, p, spec))
            requests.append(GenerationRequest(
                f"{t.trace_id}:{p.k}:early", prompt + joint + spec.forcing_text, config.forcing_max_tokens,
                t.trace_id, StopRuleSpec("first_answer", spec.name, prefix=spec.forcing_text),
                repetition_penalty=config.repetition_penalty))
    done = backend.generate(requests)
    _add_work(summary, pass_work(done, getattr(backend, "max_batch", None)))
    rows = []
    for (t, p, spec), c in zip(items, done, strict=True):
        _account(summary, c)
        summary.prompt_tokens += c.prompt_tokens
        row = _row(t, p, config, c)
        row["continuation"], row["forced_continuation"], row["forced"] = "", c.text, True
        if c.finish_reason == "overflow":
            summary.overflow += 1
        else:
            summary.forced += 1
            _set_grade(row, grade_text(spec, t.problem, spec.forcing_text + c.text, c.finish_reason == "rule"))
        rows.append(row)
    return rows


def grade_continuation(spec: DatasetSpec, problem: Problem, prefix: str, c: Completion, config: StudentConfig) -> Grade:
    """SPEC profile: the FIRST answer in the continuation alone. Preprint profile: the released
    code's reading of prefix + continuation, last answer with the last-number fallback."""
    if config.profile == "preprint":
        return spec.grader(prefix + c.text, "", problem, "teacher")
    return grade_text(spec, problem, c.text, c.finish_reason == "rule")


def grade_text(spec: DatasetSpec, problem: Problem, text: str, stopped_by_rule: bool) -> Grade:
    # Generation that ENDED (end-of-sequence or budget) cannot extend a trailing "The answer is 42":
    # a newline tells the student extractor the answer is finished (legival_core.grading docs).
    return spec.grader(text if stopped_by_rule else text + "\n", "", problem, "student")


def _row(t: TransferTrace, p: PlannedRollout, config: StudentConfig, c: Completion) -> dict[str, Any]:
    return {
        "trace_id": t.trace_id, "student_key": config.student_key, "k": p.k, "sample": 0, "m": p.m,
        "bin": p.bin, "status": "overflow" if c.finish_reason == "overflow" else "ok", "correct": None,
        "forced": False, "extracted": None, "grade_status": None, "continuation": c.text,
        "forced_continuation": None, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
        "prefill_computed": c.prefill_computed, "prefill_cached": c.prefill_cached, "finish_reason": c.finish_reason,
    }


def _set_grade(row: dict[str, Any], g: Grade) -> None:
    row["correct"], row["extracted"], row["grade_status"] = g.correct, g.extracted, g.status


def _add_work(s: TransferSummary, work: EngineWork) -> None:
    """Decode steps and context of a pass (its tokens are counted per completion by `_account`)."""
    s.decode_steps += round(work.decode_steps)
    s.context += round(work.context)


def _account(s: TransferSummary, c: Completion) -> None:
    s.prefill_computed += c.prefill_computed
    s.prefill_cached += c.prefill_cached
    s.decode_tokens += c.completion_tokens



def run_transfer(
    store: Store,
    backend: TextBackend | None,
    config: StudentConfig,
    teacher: str | None = None,
    dataset: str | None = None,
    limit: int | None = None,
    traces_per_chunk: int = 4,
    progress: Any = None,
    executor: Executor | None = None,
    timing: Timing | None = None,
) -> TransferSummary:
    """The transfer stage in this process: with `backend` (owned by the caller) or, when None, the
    backend the registry builds for `config` (closed at the end). progress(done, total) counts
    rollouts; cached ones count as done from the start. `timing`: store its batches' timings."""
    stage = TransferStage(config, teacher, dataset, limit, traces_per_chunk, backend, timing=timing)
    return run_stage(stage, store, executor, progress)
