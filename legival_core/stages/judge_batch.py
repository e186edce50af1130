"""The judge's batch path (a provider batch API, e.g. Gemini's at half price), crash-safe.

Two stages, run in this order by `legival_core.stages.judge.judge_missing`, sharing one summary:

- `ResumeBatchesStage`: every job recorded for this judge key and not finished (state `submitted`) is
  polled (or waited for) and, once it succeeded, collected: its results are stored for the traces
  that still have none and the job is marked `collected`. A job that ended FAILED/CANCELLED/EXPIRED
  gets that state and its traces are selected again by the next stage.
- `BatchSubmitStage`: the traces still to judge (those of still-pending jobs left out) go out in jobs
  of `batch_size`. Each job's name is written to `judge_batches` right after the job is created and
  before anything else happens (the run yields it and `run_stage` commits it), so a crash after that
  point never loses a paid job: the next run resumes it instead of submitting again. Only a crash
  between the job's creation and that one INSERT would orphan it. With `wait`, the new jobs are then
  waited for and collected; without, they are left `submitted` (and listed as pending) for a later run.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.judges.factory import batch_judges
from legival_core.judges.judging import (
    Judged,
    JudgeSummary,
    judge_key,
    judged,
    load_requests,
    new_summary,
    plan_requests,
    store_results,
)
from legival_core.judges.records import BatchJudge, JudgeRequest
from legival_core.stages.base import Executor, Given, Plan, Work
from legival_core.stages.isolation import UnitFailure
from legival_core.store import Store, writes
from legival_core.store import planner as reads

log = logging.getLogger("legival_core.stages.judge")

SUBMITTED = "submitted"
COLLECTED = "collected"
PENDING = "pending"
"""Not a stored state: a job polled this run that has not finished."""
LOCAL = "local"
"""Not a stored state: a chunk whose every trace got its result without a call (empty, over budget)."""


def no_batch_api(name: str) -> ValueError:
    """The error for batch mode with a judge that has no batch API (names the judges that have one)."""
    return ValueError(f"batch mode needs a judge with a batch API ({', '.join(batch_judges())}), not {name!r}")


def batch_judge(judge: Any) -> BatchJudge:
    """The judge as a batch judge, or `no_batch_api`."""
    if not isinstance(judge, BatchJudge):
        raise no_batch_api(str(getattr(judge, "name", judge)))
    return judge


def pending_trace_ids(store: Store, key: str) -> frozenset[str]:
    """The traces of this key's jobs that are submitted and not collected."""
    return frozenset(t for _, ids in reads.judge_batches(store, key, SUBMITTED) for t in json.loads(ids))


@dataclass(frozen=True, slots=True)
class BatchJob:
    """A recorded (or just created) job, with the requests of its traces that still need a result."""

    name: str
    trace_ids: tuple[str, ...]
    requests: tuple[JudgeRequest, ...]


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What happened to one job or chunk: `state` is SUBMITTED (record it), COLLECTED (store
    `results`), PENDING, LOCAL (store `results`, no job), or the provider's terminal failure state."""

    name: str
    state: str
    trace_ids: tuple[str, ...] = ()
    results: tuple[Judged, ...] = ()
    requests: tuple[JudgeRequest, ...] = ()


def commit_outcomes(store: Store, judge: BatchJudge, s: JudgeSummary, outcomes: Sequence[BatchOutcome]) -> int:
    """Write each outcome (results and job state) in its own transaction(s); returns how many chunks
    or jobs it settled (a submission settles nothing yet)."""
    for o in outcomes:
        if o.state == SUBMITTED:
            writes.record_judge_batch(store, o.name, s.judge_key, o.trace_ids, SUBMITTED)
            s.batches_submitted.append(o.name)
        elif o.state == LOCAL:
            store_results(store, judge, s, o.results)
        elif o.state == PENDING:
            s.batches_pending.append(o.name)
        elif o.state == COLLECTED:
            store_results(store, judge, s, o.results)
            writes.set_judge_batch_state(store, o.name, COLLECTED)
        else:
            log.warning("batch %s ended %s; its traces will be submitted again", o.name, o.state)
            writes.set_judge_batch_state(store, o.name, o.state)
    return sum(o.state != SUBMITTED for o in outcomes)


@dataclass(frozen=True, slots=True)
class SettleJobs:
    """Poll (or wait for) each job; collect the ones that succeeded."""

    wait: bool
    poll_interval_s: float

    def __call__(self, judge: BatchJudge, jobs: Sequence[BatchJob]) -> list[BatchOutcome]:
        out = []
        for job in jobs:
            st = judge.wait_batch(job.name, interval_s=self.poll_interval_s) if self.wait else judge.poll_batch(job.name)
            if not st.done:
                out.append(BatchOutcome(job.name, PENDING))
            elif st.succeeded:
                results = judge.collect_batch(job.name, job.requests) if job.requests else []
                out.append(BatchOutcome(job.name, COLLECTED, results=tuple(judged(job.requests, results))))
            else:
                out.append(BatchOutcome(job.name, st.state))
        return out


@dataclass(frozen=True, slots=True)
class SubmitJobs:
    """Create one job per chunk of requests (or store the chunk's local results when nothing is sent)."""

    display_name: str

    def __call__(self, judge: BatchJudge, chunks: Sequence[tuple[JudgeRequest, ...]]) -> list[BatchOutcome]:
        out = []
        for reqs in chunks:
            ids = tuple(r.trace_id for r in reqs)
            inlined, local = judge.build_batch_requests(reqs)
            if not inlined:  # every trace is empty or over budget: known without a call
                out.append(BatchOutcome("", LOCAL, ids, tuple(judged(reqs, local))))
                continue
            name = judge.submit_batch(reqs, display_name=self.display_name)
            out.append(BatchOutcome(name, SUBMITTED, ids, requests=reqs))
        return out


@dataclass(frozen=True)
class ResumeBatchesStage:
    """Settle the jobs recorded for the judge's key (module docstring); its summary holds what they
    brought, which `BatchSubmitStage` then carries on (`resumed`)."""

    judge: BatchJudge
    wait: bool
    poll_interval_s: float
    name: str = "judge-batches"

    def plan(self, store: Store) -> Plan[BatchJob, JudgeSummary]:
        s = new_summary(self.judge)
        jobs = []
        for name, ids_json in reads.judge_batches(store, s.judge_key, SUBMITTED):
            ids = tuple(json.loads(ids_json))
            have = reads.judged_trace_ids(store, s.judge_key, ids)
            jobs.append(BatchJob(name, ids, tuple(load_requests(store, [t for t in ids if t not in have]))))
            s.batches_resumed.append(name)
        return Plan(jobs, s, total=len(jobs))

    def run(self, units: Sequence[BatchJob], executor: Executor) -> Iterator[list[BatchOutcome]]:
        return executor.run(Work(Given(self.judge), SettleJobs(self.wait, self.poll_interval_s), 1), units)

    def commit(self, store: Store, results: Sequence[BatchOutcome], plan: Plan[Any, JudgeSummary]) -> int:
        return commit_outcomes(store, self.judge, plan.summary, results)


@dataclass(frozen=True)
class BatchSubmitStage:
    """Submit the traces still to judge as jobs, recording each at once; then settle them (`wait`).
    `resumed`: the summary of the `ResumeBatchesStage` run just before (its counts are carried on)."""

    judge: BatchJudge
    wait: bool
    poll_interval_s: float
    limit: int | None = None
    max_cost_usd: float | None = None
    retry_failed: bool = False
    batch_size: int = 1000
    resumed: JudgeSummary | None = None
    estimate_only: bool = False
    name: str = "judge-batch"

    def plan(self, store: Store) -> Plan[tuple[JudgeRequest, ...], JudgeSummary]:
        s = copy.deepcopy(self.resumed) if self.resumed is not None else new_summary(self.judge, self.estimate_only)
        reqs = plan_requests(store, self.judge, s, limit=self.limit, retry_failed=self.retry_failed,
                             max_cost_usd=self.max_cost_usd, batch=True,
                             exclude=pending_trace_ids(store, s.judge_key))
        chunks = [tuple(reqs[i : i + self.batch_size]) for i in range(0, len(reqs), self.batch_size)]
        return Plan(chunks, s, total=len(chunks))

    def run(self, units: Sequence[tuple[JudgeRequest, ...]], executor: Executor) -> Iterator[list[BatchOutcome]]:
        display = f"legival-backtracking-{judge_key(self.judge)[:12]}"
        jobs: list[BatchJob] = []
        for outcomes in executor.run(Work(Given(self.judge), SubmitJobs(display), 1), units):
            yield outcomes  # committed (the job recorded) before the next job is created or polled
            jobs += [BatchJob(o.name, o.trace_ids, o.requests) for o in outcomes
                     if not isinstance(o, UnitFailure) and o.state == SUBMITTED]
        if jobs:
            yield from executor.run(Work(Given(self.judge), SettleJobs(self.wait, self.poll_interval_s), 1),
                                    jobs)

    def commit(self, store: Store, results: Sequence[BatchOutcome], plan: Plan[Any, JudgeSummary]) -> int:
        return commit_outcomes(store, self.judge, plan.summary, results)
