"""The judge stage: LLM-judge backtracking for the traces that have no result from this judge yet.

SPEC section 3 ("backtracking"), issue 5. `run_judge` is the one entry point of `legival judge` and
the Prefect judge task: it builds the spec's judge through the registry (`judges.factory.make_judge`)
and runs the stages below, or, for `lexical` (a judge that calls no model), makes sure the lexical
backtracking rows of the efficiency stage exist.

A judge's results are keyed by `judge_key`, a content hash of `judge.cache_key_params()` (judge name,
model, prompt version, temperature, windowing; never keys, endpoints, timeouts or concurrency), so a
rerun with the same judge calls nothing and a new model or prompt version is judged afresh.

Selection: traces in the stable order (teacher, dataset, problem_id, trace_id); `limit` keeps the
first N traces of each (teacher, dataset), the same rule as `legival transfer --limit`. Of those,
the traces with a stored result for the key are `cached`; the rest are judged. Datasets without a
judge rubric are skipped and counted (`skipped_no_rubric`), never judged with another's rubric.

Online path (`JudgeStage`): the requests go to `judge.judge_many` in chunks, and each chunk's results
are committed in one transaction as soon as it finishes, so a crash loses at most the chunk in flight.
One circuit breaker (`llm.breaker`) spans the chunks of a run: when the endpoint cannot be reached,
the first traces fail fast and the rest are not sent (nothing stored for them: `not_sent`).
Batch path (a provider batch API): `judge_batch.py`, crash-safe (each job is recorded as soon as it
is created, and a rerun resumes recorded jobs before submitting anything).

Stored per trace: status (ok/failed/overflow), m, the flagged step numbers (JSON), the fraction
|flagged| / m (null unless `ok` and m > 0: a failed judgement is missing data, never "no
backtracking"), the reply text, the reason of a failure, dropped out-of-range step numbers, retries
and token counts. The API key is never stored: replies and (scrubbed) reasons only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core.judges.base import BaseJudge
from legival_core.judges.factory import judge_info, make_judge
from legival_core.judges.judging import (
    Judged,
    JudgeSummary,
    Selection,
    judge_key,
    judged,
    load_requests,
    new_summary,
    plan_requests,
    select_traces,
    store_results,
)
from legival_core.judges.records import BATCH_POLL_INTERVAL_S, JudgeError, JudgeRequest
from legival_core.llm.breaker import Breaker
from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.run_config import Efficiency, Judge
from legival_core.stages.base import (
    Executor,
    Given,
    Plan,
    Progress,
    StoreAccess,
    Work,
    run_stage,
    store_access,
)
from legival_core.stages.conditions import StageFailed
from legival_core.stages.efficiency import compute_efficiency
from legival_core.stages.isolation import current
from legival_core.stages.judge_batch import BatchSubmitStage, ResumeBatchesStage, batch_judge, no_batch_api
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store
from legival_core.store import failures as failure_rows
from legival_core.store import planner as reads
from legival_core.types import canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.judges.judging import AnyJudge
    from legival_core.llm.cost import Prices

__all__ = [
    "JudgeStage",
    "JudgeSummary",
    "Selection",
    "StoredCounts",
    "ensure_lexical",
    "judge_key",
    "judge_missing",
    "load_requests",
    "run_judge",
    "select_traces",
    "stored_judge_counts",
]

ProgressFn = Callable[[int, int], None]
"""progress(done, total) over the traces to judge in this run."""


# ------------------------------------------------------------------------------------- online stage


class _Ticker:
    """Progress inside a chunk (a chunk of a paid API can take minutes): done = earlier chunks + the
    requests of this chunk finished so far. In-process only (judges are HTTP clients)."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress, self.total, self.base = progress, total, 0

    def at(self, base: int) -> Callable[[int], None]:
        return lambda n: self.progress(base + n, self.total)


@dataclass(frozen=True, slots=True)
class HeldBack:
    """A chunk's result: how many of its traces the run's circuit breaker held back (not sent)."""

    traces: int


@dataclass(frozen=True, slots=True)
class JudgeChunk:
    """Judge one chunk of requests with the worker's judge (concurrently, inside `judge_many`); the
    results end with `HeldBack` when the breaker held some of the chunk's traces back."""

    ticker: _Ticker | None = None
    breaker: Breaker | None = None

    def __call__(self, judge: AnyJudge, reqs: Sequence[JudgeRequest]) -> list[Judged | HeldBack]:
        t = self.ticker
        progress = t.at(t.base) if t is not None else None
        before = self.breaker.not_sent if self.breaker is not None else 0
        if self.breaker is not None and isinstance(judge, BaseJudge):
            results = judge.judge_many(reqs, progress=progress, breaker=self.breaker)
        else:
            results = judge.judge_many(reqs, progress=progress)
        if t is not None:
            t.base += len(reqs)
        out: list[Judged | HeldBack] = list(judged(reqs, results))
        held = (self.breaker.not_sent if self.breaker is not None else 0) - before
        if held:
            out.append(HeldBack(held))
        return out


@dataclass(frozen=True)
class JudgeStage:
    """Judge, online, the selected traces that have no result for this judge (module docstring).
    `chunk_size` (default 4 x the judge's concurrency, at least 32) is the commit unit; `progress`
    also ticks inside a chunk. Each `run` has one circuit breaker over all its chunks; the traces it
    held back come back as `HeldBack` results (counted, never stored)."""

    judge: AnyJudge
    limit: int | None = None
    max_cost_usd: float | None = None
    estimate_only: bool = False
    retry_failed: bool = False
    chunk_size: int | None = None
    progress: Progress | None = None
    name: str = "judge"

    def plan(self, store: Store) -> Plan[JudgeRequest, JudgeSummary]:
        s = new_summary(self.judge, self.estimate_only)
        reqs = plan_requests(store, self.judge, s, limit=self.limit, retry_failed=self.retry_failed,
                             max_cost_usd=self.max_cost_usd, batch=False)
        return Plan(reqs, s, total=len(reqs))

    def run(self, units: Sequence[JudgeRequest], executor: Executor) -> Iterator[list[Judged | HeldBack]]:
        size = self.chunk_size or max(32, 4 * int(getattr(getattr(self.judge, "limits", None), "concurrency", 8)))
        ticker = _Ticker(self.progress, len(units)) if self.progress is not None else None
        breaker = self.judge.new_breaker() if isinstance(self.judge, BaseJudge) else None
        return executor.run(Work(Given(self.judge), JudgeChunk(ticker, breaker), size), units)

    def commit(self, store: Store, results: Sequence[Judged | HeldBack], plan: Plan[Any, JudgeSummary]) -> int:
        """Store a chunk's results; the traces the breaker held back count as done for progress."""
        held = sum(r.traces for r in results if isinstance(r, HeldBack))
        done = [r for r in results if not isinstance(r, HeldBack)]
        store_results(store, self.judge, plan.summary, done)
        plan.summary.not_sent += held
        return len(done) + held


# ------------------------------------------------------------------------------------- entry points


def judge_missing(
    store: Store | StoreAccess,
    judge: AnyJudge,
    limit: int | None = None,
    progress: ProgressFn | None = None,
    max_cost_usd: float | None = None,
    batch: bool = False,
    *,
    estimate_only: bool = False,
    retry_failed: bool = False,
    chunk_size: int | None = None,
    wait: bool = True,
    poll_interval_s: float = BATCH_POLL_INTERVAL_S,
    batch_size: int = 1000,
) -> JudgeSummary:
    """Judge the selected traces that have no result from `judge` (a judge object the caller built
    and keeps; module docstring).

    `estimate_only`: tokens and dollars for the traces to judge, no call at all. `max_cost_usd`:
    refuse to start (CostLimitExceeded, nothing sent) when the estimate is above it. `batch`: the
    judge's batch API (half price for Gemini); `wait=False` submits and records the jobs and returns,
    a later run collects them.
    """
    if not batch:
        stage = JudgeStage(judge, limit, max_cost_usd, estimate_only, retry_failed, chunk_size, progress)
        return run_stage(stage, store, None, progress)
    bj = batch_judge(judge)
    resumed = None if estimate_only else run_stage(ResumeBatchesStage(bj, wait, poll_interval_s), store)
    return run_stage(BatchSubmitStage(bj, wait, poll_interval_s, limit, max_cost_usd, retry_failed, batch_size,
                                      resumed=resumed, estimate_only=estimate_only), store)


def run_judge(
    store: Store | StoreAccess,
    cfg: Judge,
    *,
    progress: ProgressFn | None = None,
    estimate_only: bool = False,
    retry_failed: bool | None = None,
    batch: bool = False,
    wait: bool = True,
    poll_interval_s: float = BATCH_POLL_INTERVAL_S,
    prices: Prices | None = None,
) -> JudgeSummary:
    """The judge stage for a spec's `judge` section: what `legival judge` and the Prefect task run.

    A judge that calls no model (`lexical`) ensures its stored rows (`ensure_lexical`); an LLM judge
    is built by the registry's factory and runs `judge_missing` with the section's limit and cost
    cap. Failed calls do not raise: the summary counts them (`failed`, `not_sent`, `first_failure`;
    `every_call_failed`, `failure_note()`), and the caller decides (`legival judge` exits 2 when
    every call failed). Errors: MissingAPIKey (a JudgeError) without a key (unless `estimate_only`), ValueError for
    `batch` with a judge without a batch API, CostLimitExceeded above `cfg.max_cost_usd`; messages
    are scrubbed of the judge's secrets. `retry_failed` (default: the command's or run's
    `--retry-failed`, `stages.isolation`) judges the traces stored as failed again."""
    if retry_failed is None:
        retry_failed = current().retry_failed
    info = judge_info(cfg.name)
    if not info.llm:
        return ensure_lexical(store, progress)
    if batch and not info.batch:
        raise no_batch_api(cfg.name)
    judge = make_judge(cfg.name, model=cfg.model, base_url=cfg.base_url, concurrency=cfg.concurrency,
                       rpm=cfg.rpm, prices=prices, estimate_only=estimate_only)
    try:
        s = judge_missing(store, judge, cfg.limit, progress, cfg.max_cost_usd, batch,
                          estimate_only=estimate_only, retry_failed=retry_failed, wait=wait,
                          poll_interval_s=poll_interval_s)
        s.first_failure = judge.scrub(s.first_failure)
        _remember_outcome(store, s, cfg.name)
        return s
    except Exception as e:
        scrubbed = judge.scrub(str(e))
        if scrubbed != str(e):
            raise JudgeError(scrubbed) from None
        raise
    finally:
        close = getattr(judge, "close", None)
        if callable(close):
            close()


def _remember_outcome(store: Store | StoreAccess, s: JudgeSummary, name: str) -> None:
    """Every call failed: the stage failed as a whole, with its reason (the report's coverage names it
    until a judge run gets through); some call got a judgement: forget an earlier such failure."""
    if not s.judge_calls:
        return
    access = store_access(store) if isinstance(store, Store) else store
    with access() as st:
        if s.every_call_failed:
            failure_rows.record_stage_failure(st, "judge", f"judge {name}", s.failure_note())
        else:
            failure_rows.clear_stage_failures(st, "judge")


def ensure_lexical(store: Store | StoreAccess, progress: ProgressFn | None = None) -> JudgeSummary:
    """The `lexical` fallback: make sure every trace has its lexical backtracking row (written by the
    efficiency stage, metric "backtracking"); no judge call is ever made."""
    from legival_core.judges.lexical import LexicalJudge

    params = canonical_json(BACKTRACKING.params(Efficiency()))
    access = store_access(store) if isinstance(store, Store) else store
    with access() as st:
        total = st.count("traces")
        missing = reads.traces_missing_metric(st, BACKTRACKING.name, params, BACKTRACKING.version).height
    name = LexicalJudge.name
    s = JudgeSummary(judge=name, model=name, judge_key=content_hash(params, BACKTRACKING.version))
    s.selected, s.cached, s.todo = total, total - missing, missing
    if missing:
        compute_efficiency(access, Efficiency(), progress=progress)
        s.ok = missing
    return s


# ---------------------------------------------------------------------------------------- agreement


@dataclass(frozen=True, slots=True)
class StoredCounts:
    """A judge's per-trace backtracking counts (distinct flagged steps of its `ok` results), the flagged
    steps themselves and each trace's step count m."""

    judge_key: str
    judge: str
    model: str
    counts: dict[str, int]
    datasets: dict[str, str]
    steps: dict[str, tuple[int, ...]]
    m: dict[str, int]


def stored_judge_counts(store: Store, trace_ids: Sequence[str], key: str | None = None) -> StoredCounts:
    """Counts for `trace_ids` from one judge key: the given one (a unique prefix is enough), else the
    only key with `ok` results for these traces; ValueError names the candidates when ambiguous."""
    ids = list(trace_ids)
    keys = reads.judge_keys_for(store, ids)
    if key is not None:
        keys = [k for k in keys if k[0].startswith(key)]
    if len(keys) != 1:
        listing = "; ".join(f"{k} ({j}/{m}, {n} traces)" for k, j, m, n in keys) or "none"
        what = f"judge key {key!r}" if key is not None else "a judge"
        raise ValueError(
            f"need exactly one judge key with ok results for the annotated traces, matching {what}; "
            f"found: {listing}" + ("" if key is not None else " (pass --judge-key)")
        )
    k, j, m, _ = keys[0]
    flagged = reads.judge_flagged_steps(store, k, ids)
    steps = {t: tuple(sorted({int(x) for x in json.loads(f or "[]")})) for t, (f, _m) in flagged.items()}
    return StoredCounts(k, j, m, {t: len(s) for t, s in steps.items()}, reads.trace_datasets(store, ids), steps,
                        {t: n for t, (_f, n) in flagged.items()})


class JudgeCallsFailed(StageFailed):
    """Every judge call of a run's judge job failed (unreachable endpoint, rejected key): the stage
    failed as a whole for a known reason (`stages.conditions`), not retried by Prefect (the judge
    already retried what could succeed); the traces not sent or failed transiently stay to do."""

    def __init__(self, note: str) -> None:
        super().__init__("judge", note)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


def _judge_jobs(ctx: RunContext) -> list[Job]:
    cfg = ctx.spec.judge
    if not cfg.enabled:
        return []

    def run(access: StoreAccess, _executor: Executor | None, progress: Progress | None) -> JudgeSummary:
        s = run_judge(access, cfg, progress=progress)
        if s.every_call_failed:  # as `legival judge` exits 2: the run says why instead of looking done
            raise JudgeCallsFailed(s.failure_note())
        return s

    return [Job("judge", f"judge {cfg.name}", run)]


def _judge_calls(results: list[Any]) -> dict[str, Any]:
    return {"judge_calls": sum(r.judge_calls for r in results)}


register_stage("judge", "legival judge --db DB", needs=("segment",), requires=("segment",), build=_judge_jobs,
               summarize=_judge_calls, order=70, retries=2, retry_delay_s=10, aliases=("judge-batch", "judge-batches"),
               description="backtracking by an LLM judge, or the lexical cues (SPEC section 3)")
