"""What the online and the batch judge stages share: the summary, the cache key, the selection of the
traces to judge, their requests, the cost estimate, and the rows written per result.

Rules (selection order, `limit`, caching, missing rubrics, what a row holds) are in the docstring of
`legival_core.stages.judge`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from legival_core.bulk import spread
from legival_core.judges.cost import estimate_cost
from legival_core.judges.prompt import has_rubric
from legival_core.judges.records import JudgeRequest, JudgeResult, backtracking_fraction
from legival_core.llm.cost import CostEstimate, CostLimitExceeded, Prices
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store, writes
from legival_core.store import planner as reads
from legival_core.types import canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.judges.base import BaseJudge
    from legival_core.judges.records import Judge

    AnyJudge = Judge | BaseJudge
    """`BaseJudge` declares `name` as a ClassVar, which mypy does not match to the protocol's attribute."""

log = logging.getLogger("legival_core.stages.judge")

ESTIMATE_CHUNK = 1000
"""Traces per partial estimate (the estimate is the sum of its chunks' rounded estimates)."""
ESTIMATE_SAMPLE = 2000
"""An estimate-only run (`legival plan`, `judge --estimate-only`) over more traces than this renders the
prompts of that many, spread evenly over the selection, and scales their estimate by the selection's
size (rendering every prompt of a paper-scale store took ~20 s of a plan). A run that sends calls
always estimates (and guards `max_cost_usd` on) every prompt it sends."""


@dataclass(slots=True)
class JudgeSummary:
    """What one run did. `judge_calls` counts traces sent to the judge this run (one judgement each;
    retries and repair re-asks are in `retries`/`repaired`); `cached` counts selected traces that
    already had a result for this judge key; `not_sent` the traces the run's circuit breaker held back
    (the endpoint could not be reached: nothing is stored for them, they stay to do); `failed` every
    trace whose judgement failed this run, of which `deferred` failed for a reason a later call could
    turn out otherwise (unreachable, rate limits or server errors past the retries: not stored, they
    stay to do, like `not_sent`); `first_failure` the (scrubbed) reason of the first failed trace."""

    judge: str
    model: str
    judge_key: str
    selected: int = 0
    cached: int = 0
    todo: int = 0
    judge_calls: int = 0
    ok: int = 0
    failed: int = 0
    overflow: int = 0
    not_sent: int = 0
    deferred: int = 0
    first_failure: str = ""
    retries: int = 0
    repaired: int = 0
    dropped_out_of_range: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    skipped_no_rubric: int = 0
    estimate_only: bool = False
    estimated_input_tokens: int = 0
    estimated_output_tokens: int = 0
    estimated_cost_usd: float = 0.0
    estimate_basis: str = ""
    """How the estimate was made when not from every prompt: "sampled N of M traces"."""
    batches_submitted: list[str] = field(default_factory=list)
    batches_resumed: list[str] = field(default_factory=list)
    batches_pending: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["estimated_cost_usd"] = round(self.estimated_cost_usd, 6)
        return d

    @property
    def every_call_failed(self) -> bool:
        """Traces were sent and none got a judgement (`legival judge` exits 2)."""
        return self.judge_calls > 0 and self.failed >= self.judge_calls

    def failure_note(self) -> str:
        """One line on what failed, for stderr ('' when nothing did): the first reason and the counts."""
        if not self.failed and not self.not_sent:
            return ""
        traces = f"{self.judge_calls} trace{'s' if self.judge_calls != 1 else ''}"
        held = f", {self.not_sent} not sent" if self.not_sent else ""
        if self.deferred:
            held += f", {self.deferred + self.not_sent} stay to do"
        reason = self.first_failure or "no reason recorded"
        if self.every_call_failed:
            return f"judge {self.judge}: every call failed: {reason} ({traces} tried{held})"
        return f"judge {self.judge}: {self.failed} of {traces} failed{held}; first reason: {reason}"

    def add(self, results: Sequence[JudgeResult]) -> None:
        for r in results:
            if r.status == "failed" and not self.first_failure:
                self.first_failure = r.reason or "no reason given"
            self.judge_calls += r.windows > 0
            self.ok += r.status == "ok"
            self.failed += r.status == "failed"
            self.deferred += r.status == "failed" and r.transient
            self.overflow += r.status == "overflow"
            self.retries += r.retries
            self.repaired += r.repaired
            self.dropped_out_of_range += r.dropped_out_of_range
            self.input_tokens += r.input_tokens
            self.output_tokens += r.output_tokens


def judge_key(judge: AnyJudge) -> str:
    """The cache key of a judge's results: a content hash of the fields that change a judgement."""
    return content_hash(canonical_json(judge.cache_key_params()))


def new_summary(judge: AnyJudge, estimate_only: bool = False) -> JudgeSummary:
    return JudgeSummary(judge=judge.name, model=judge.model, judge_key=judge_key(judge), estimate_only=estimate_only)


# -------------------------------------------------------------------------------------- selection


@dataclass(frozen=True, slots=True)
class Selection:
    todo: tuple[str, ...]
    selected: int
    cached: int
    skipped_no_rubric: int


def select_traces(
    store: Store, key: str, limit: int | None = None, retry_failed: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> Selection:
    """The traces to judge for `key`, in the stable order (module docstring of `stages.judge`)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    rows = reads.judge_selection(store, key, limit)
    todo: list[str] = []
    cached = no_rubric = 0
    for tid, dataset, status in rows:
        if status is not None and not (retry_failed and status == "failed"):
            cached += 1
        elif not has_rubric(dataset):
            no_rubric += 1
        elif tid not in exclude:
            todo.append(tid)
    if no_rubric:
        log.warning("%d selected traces belong to datasets without a judge rubric; skipped", no_rubric)
    return Selection(tuple(todo), len(rows), cached, no_rubric)


def load_requests(store: Store, trace_ids: Sequence[str]) -> list[JudgeRequest]:
    """Judge requests for `trace_ids` (in that order): the stored steps, numbered from 1 by the judge,
    and the problem's question."""
    if not trace_ids:
        return []
    inputs = reads.judge_inputs(store, trace_ids)
    spans = reads.step_spans(store, list(trace_ids), SEGMENTER_VERSION)
    out = []
    for tid in trace_ids:
        ds, text, q = inputs[tid]
        out.append(JudgeRequest(tid, ds, q, tuple(text[a:b] for a, b in spans[tid])))
    return out


def plan_requests(
    store: Store, judge: AnyJudge, s: JudgeSummary, *, limit: int | None, retry_failed: bool,
    max_cost_usd: float | None, batch: bool, exclude: frozenset[str] = frozenset(),
) -> list[JudgeRequest]:
    """Select the traces, fill the summary's selection counts and estimate, and return the requests
    to send: none under `estimate_only`; CostLimitExceeded (nothing sent) above `max_cost_usd`."""
    sel = select_traces(store, s.judge_key, limit, retry_failed, exclude)
    s.selected, s.cached, s.skipped_no_rubric, s.todo = sel.selected, sel.cached, sel.skipped_no_rubric, len(sel.todo)
    if s.estimate_only and len(sel.todo) > ESTIMATE_SAMPLE:
        picked = spread(sel.todo, ESTIMATE_SAMPLE)
        est = estimate(judge, load_requests(store, picked), batch).scaled(len(sel.todo) / len(picked))
        s.estimate_basis = f"sampled {len(picked)} of {len(sel.todo)} traces"
        s.estimated_input_tokens, s.estimated_output_tokens = est.input_tokens, est.output_tokens
        s.estimated_cost_usd = est.usd
        return []
    reqs = load_requests(store, sel.todo)
    est = estimate(judge, reqs, batch)
    s.estimated_input_tokens, s.estimated_output_tokens = est.input_tokens, est.output_tokens
    s.estimated_cost_usd = est.usd
    if s.estimate_only or not reqs:
        return []
    if max_cost_usd is not None and est.usd > max_cost_usd:
        raise CostLimitExceeded(
            f"estimated judge cost ${est.usd:.4f} for {est.calls} calls (~{est.input_tokens} input, "
            f"~{est.output_tokens} output tokens) exceeds max_cost_usd=${max_cost_usd:.4f}; raise the "
            "limit or judge fewer traces (--limit)"
        )
    return reqs


def estimate(judge: AnyJudge, reqs: Sequence[JudgeRequest], batch: bool) -> CostEstimate:
    """The cost estimate of judging `reqs` once each, summed over chunks of `ESTIMATE_CHUNK`."""
    prices = getattr(judge, "prices", None) or Prices()
    policy = getattr(judge, "window_policy", None)
    cpt = float(getattr(policy, "chars_per_token", 4.0))
    incq = bool(getattr(judge, "include_question", False))
    calls = tin = tout = 0
    usd = 0.0
    for i in range(0, len(reqs), ESTIMATE_CHUNK):
        e = estimate_cost(reqs[i : i + ESTIMATE_CHUNK], prices, chars_per_token=cpt, include_question=incq,
                          batch=batch)
        calls, tin, tout, usd = calls + e.calls, tin + e.input_tokens, tout + e.output_tokens, usd + e.usd
    return CostEstimate(calls, tin, tout, usd)


# ------------------------------------------------------------------------------------------ writes


@dataclass(frozen=True, slots=True)
class Judged:
    """One result and the step count of its trace (the denominator of its fraction)."""

    result: JudgeResult
    m: int


def judged(requests: Sequence[JudgeRequest], results: Sequence[JudgeResult]) -> list[Judged]:
    m = {r.trace_id: r.m for r in requests}
    return [Judged(r, m[r.trace_id]) for r in results]


def result_row(r: JudgeResult, key: str, judge: AnyJudge, m: int) -> dict[str, Any]:
    return {
        "trace_id": r.trace_id,
        "judge_key": key,
        "judge": judge.name,
        "model": judge.model,
        "prompt_version": judge.prompt_version,
        "status": r.status,
        "m": m,
        "flagged_steps": canonical_json(list(r.flagged_steps)),
        "fraction": backtracking_fraction(r, m),
        "backtracking_detected": r.backtracking_detected,
        "confidence": r.confidence,
        "final_answer": r.final_answer,
        "raw_json": r.raw_json,
        "reason": r.reason,
        "dropped_out_of_range": r.dropped_out_of_range,
        "retries": r.retries,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
    }


def store_results(store: Store, judge: AnyJudge, s: JudgeSummary, items: Sequence[Judged]) -> None:
    """One transaction: the results' rows (a `--retry-failed` rerun's replace the old failed rows). A
    transient failure is counted, never stored: its trace stays to do (`JudgeSummary.deferred`)."""
    writes.replace_failed_judge_results(store, s.judge_key, [result_row(j.result, s.judge_key, judge, j.m)
                                                             for j in items if not j.result.transient])
    s.add([j.result for j in items])

