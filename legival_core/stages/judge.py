"""The judge stage: LLM-judge backtracking for the traces that have no result from this judge yet.

SPEC section 3 ("backtracking"), issue 5. A judge's results are keyed by `judge_key`, a content hash
of `judge.cache_key_params()` (judge name, model, prompt version, temperature, windowing; never keys,
endpoints, timeouts or concurrency), so a rerun with the same judge calls nothing and a new model or
prompt version is judged afresh.

Selection: traces in the stable order (teacher, dataset, problem_id, trace_id); `limit` keeps the
first N traces of each (teacher, dataset), the same rule as `legival transfer --limit`. Of those,
the traces with a stored result for the key are `cached`; the rest are judged. Datasets without a
judge rubric are skipped and counted (`skipped_no_rubric`), never judged with another's rubric.

Online path: the requests go to `judge.judge_many` in chunks, and each chunk's results are committed
in one transaction as soon as it finishes, so a crash loses at most the chunk in flight.

Batch path (Gemini Batch API): each job's name is written to `judge_batches` (state `submitted`)
right after the job is created and before any polling. A rerun first resumes every recorded job that
is not finished for this key: it polls it and collects its results instead of submitting again. A job
that ends FAILED/CANCELLED/EXPIRED is marked with that state and its traces are submitted anew. A
crash between the job's creation and its recording (one INSERT) would orphan that job.

Stored per trace: status (ok/failed/overflow), m, the flagged step numbers (JSON), the fraction
|flagged| / m (null unless `ok` and m > 0: a failed judgement is missing data, never "no
backtracking"), the reply text, the reason of a failure, dropped out-of-range step numbers, retries
and token counts. The API key is never stored: replies and (scrubbed) reasons only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from legival_core.judges import (
    CostEstimate,
    CostLimitExceeded,
    JudgeRequest,
    JudgeResult,
    Prices,
    backtracking_fraction,
    estimate_cost,
)
from legival_core.judges.prompt import has_rubric
from legival_core.segment import SEGMENTER_VERSION
from legival_core.stages.efficiency import ensure_steps as segment_missing
from legival_core.store import Store
from legival_core.types import canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.judges import BaseJudge, Judge
    from legival_core.judges.gemini import GeminiJudge

    AnyJudge = Judge | BaseJudge
    """`BaseJudge` declares `name` as a ClassVar, which mypy does not match to the protocol's attribute."""

log = logging.getLogger("legival_core.stages.judge")

ProgressFn = Callable[[int, int], None]
"""progress(done, total) over the traces to judge in this run."""

LEXICAL = "lexical"
BATCH_SUBMITTED = "submitted"
BATCH_COLLECTED = "collected"


@dataclass(slots=True)
class JudgeSummary:
    """What one run did. `judge_calls` counts traces sent to the judge this run (one judgement each;
    retries and repair re-asks are in `retries`/`repaired`); `cached` counts selected traces that
    already had a result for this judge key."""

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
    batches_submitted: list[str] = field(default_factory=list)
    batches_resumed: list[str] = field(default_factory=list)
    batches_pending: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["estimated_cost_usd"] = round(self.estimated_cost_usd, 6)
        return d

    def add(self, results: Sequence[JudgeResult]) -> None:
        for r in results:
            self.judge_calls += r.windows > 0
            self.ok += r.status == "ok"
            self.failed += r.status == "failed"
            self.overflow += r.status == "overflow"
            self.retries += r.retries
            self.repaired += r.repaired
            self.dropped_out_of_range += r.dropped_out_of_range
            self.input_tokens += r.input_tokens
            self.output_tokens += r.output_tokens


def judge_key(judge: AnyJudge) -> str:
    """The cache key of a judge's results: a content hash of the fields that change a judgement."""
    return content_hash(canonical_json(judge.cache_key_params()))


# ------------------------------------------------------------------------------------------ steps


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
    """The traces to judge for `key`, in the stable order (module docstring)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    qualify = "" if limit is None else "QUALIFY row_number() OVER (PARTITION BY t.teacher, t.dataset " \
        "ORDER BY t.problem_id, t.trace_id) <= ?"
    params: list[Any] = [key] + ([] if limit is None else [limit])
    rows = store.run(
        "SELECT t.trace_id, t.dataset, r.status FROM traces t "
        "LEFT JOIN judge_results r ON r.trace_id = t.trace_id AND r.judge_key = ? "
        f"{qualify} ORDER BY t.teacher, t.dataset, t.problem_id, t.trace_id",
        params,
    )
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
    import pyarrow as pa

    store.con.register("_judge_ids", pa.table({"trace_id": list(trace_ids)}))
    try:
        rows = store.run(
            "SELECT t.trace_id, t.dataset, t.reasoning, coalesce(p.question, '') FROM traces t "
            "JOIN _judge_ids USING (trace_id) "
            "LEFT JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id"
        )
    finally:
        store.con.unregister("_judge_ids")
    spans = store.step_spans(list(trace_ids), SEGMENTER_VERSION)
    by_id = {tid: (ds, text, q) for tid, ds, text, q in rows}
    out = []
    for tid in trace_ids:
        ds, text, q = by_id[tid]
        out.append(JudgeRequest(tid, ds, q, tuple(text[a:b] for a, b in spans[tid])))
    return out


def _chunks(ids: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


# ------------------------------------------------------------------------------------------ writes


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


def _commit(
    store: Store, judge: AnyJudge, key: str, reqs: Sequence[JudgeRequest], results: Sequence[JudgeResult],
    s: JudgeSummary,
) -> None:
    m = {r.trace_id: r.m for r in reqs}
    rows = [result_row(r, key, judge, m[r.trace_id]) for r in results]
    ids = [r.trace_id for r in results]
    with store.transaction():
        if ids:  # a --retry-failed rerun replaces the old failed rows
            store.run(
                "DELETE FROM judge_results WHERE judge_key = ? AND status = 'failed' "
                "AND list_contains(?, trace_id)",
                [key, ids],
            )
        store.insert_rows("judge_results", rows)
    s.add(results)


# --------------------------------------------------------------------------------------- the stage


def judge_missing(
    store: Store,
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
    poll_interval_s: float = 30.0,
    batch_size: int = 1000,
) -> JudgeSummary:
    """Judge the selected traces that have no result for this judge (module docstring).

    `estimate_only`: tokens and dollars for the traces to judge, no call at all. `max_cost_usd`:
    refuse to start (CostLimitExceeded, nothing sent) when the estimate is above it. `batch`: the
    Gemini Batch API (half price); `wait=False` submits and records the jobs and returns, a later run
    collects them. `chunk_size` (default 4 x the judge's concurrency, at least 32) is the commit unit
    of the online path.
    """
    key = judge_key(judge)
    s = JudgeSummary(judge=judge.name, model=judge.model, judge_key=key, estimate_only=estimate_only)
    segment_missing(store)
    gem = _batch_judge(judge) if batch else None
    if gem is not None and not estimate_only:
        _resume_batches(store, gem, key, s, wait, poll_interval_s)
    pending = _pending_trace_ids(store, key) if batch else frozenset()
    sel = select_traces(store, key, limit, retry_failed, exclude=pending)
    s.selected, s.cached, s.skipped_no_rubric, s.todo = (
        sel.selected, sel.cached, sel.skipped_no_rubric, len(sel.todo),
    )
    est = _estimate(store, judge, sel.todo, batch)
    s.estimated_input_tokens, s.estimated_output_tokens = est.input_tokens, est.output_tokens
    s.estimated_cost_usd = est.usd
    if estimate_only or not sel.todo:
        return s
    if max_cost_usd is not None and est.usd > max_cost_usd:
        _refuse(est, max_cost_usd)
    if gem is not None:
        _submit_batches(store, gem, key, sel.todo, s, wait, poll_interval_s, batch_size)
        return s
    size = chunk_size or max(32, 4 * int(getattr(getattr(judge, "limits", None), "concurrency", 8)))
    total = len(sel.todo)
    done = 0
    if progress is not None:
        progress(0, total)
    for part in _chunks(sel.todo, size):
        reqs = load_requests(store, part)
        base = done

        def step(n: int, base: int = base) -> None:
            if progress is not None:
                progress(base + n, total)

        results = judge.judge_many(reqs, progress=step)
        _commit(store, judge, key, reqs, results, s)
        done += len(reqs)
    return s


def _refuse(est: CostEstimate, max_cost_usd: float) -> None:
    """The same refusal as `guard_cost`, for an estimate summed over chunks."""
    raise CostLimitExceeded(
        f"estimated judge cost ${est.usd:.4f} for {est.calls} calls (~{est.input_tokens} input, "
        f"~{est.output_tokens} output tokens) exceeds max_cost_usd=${max_cost_usd:.4f}; raise the "
        "limit or judge fewer traces (--limit)"
    )


def _estimate(store: Store, judge: AnyJudge, todo: Sequence[str], batch: bool) -> CostEstimate:
    """The cost estimate of judging `todo` once each, summed over chunks (texts are read in chunks)."""
    prices = getattr(judge, "prices", None) or Prices()
    policy = getattr(judge, "window_policy", None)
    cpt = float(getattr(policy, "chars_per_token", 4.0))
    incq = bool(getattr(judge, "include_question", False))
    calls = tin = tout = 0
    usd = 0.0
    for part in _chunks(todo, 1000):
        e = estimate_cost(
            load_requests(store, part), prices, chars_per_token=cpt, include_question=incq, batch=batch
        )
        calls, tin, tout, usd = calls + e.calls, tin + e.input_tokens, tout + e.output_tokens, usd + e.usd
    return CostEstimate(calls, tin, tout, usd)


# ------------------------------------------------------------------------------------------ batches


def _batch_judge(judge: AnyJudge) -> GeminiJudge:
    from legival_core.judges.gemini import GeminiJudge

    if not isinstance(judge, GeminiJudge):
        raise ValueError(f"batch mode needs the gemini judge (the Gemini Batch API), not {judge.name!r}")
    return judge


def _pending_trace_ids(store: Store, key: str) -> frozenset[str]:
    rows = store.run(
        "SELECT trace_ids FROM judge_batches WHERE judge_key = ? AND state = ?", [key, BATCH_SUBMITTED]
    )
    return frozenset(t for (ids,) in rows for t in json.loads(ids))


def _record_batch(store: Store, name: str, key: str, ids: Sequence[str]) -> None:
    with store.transaction():
        store.insert_rows(
            "judge_batches",
            [{"batch_name": name, "judge_key": key, "trace_ids": json.dumps(list(ids)), "state": BATCH_SUBMITTED}],
        )


def _set_batch_state(store: Store, name: str, state: str) -> None:
    store.run("UPDATE judge_batches SET state = ? WHERE batch_name = ?", [state, name])


def _collect(store: Store, gem: GeminiJudge, key: str, name: str, ids: Sequence[str], s: JudgeSummary) -> None:
    """Store a finished job's results for the traces that still have none, then mark it collected."""
    have = {
        t for (t,) in store.run(
            "SELECT trace_id FROM judge_results WHERE judge_key = ? AND status <> 'failed' "
            "AND list_contains(?, trace_id)",
            [key, list(ids)],
        )
    }
    reqs = load_requests(store, [t for t in ids if t not in have])
    results = gem.collect_batch(name, reqs) if reqs else []
    _commit(store, gem, key, reqs, results, s)
    _set_batch_state(store, name, BATCH_COLLECTED)


def _settle_batch(
    store: Store, gem: GeminiJudge, key: str, name: str, ids: Sequence[str], s: JudgeSummary,
    wait: bool, poll_interval_s: float,
) -> None:
    st = gem.wait_batch(name, interval_s=poll_interval_s) if wait else gem.poll_batch(name)
    if not st.done:
        s.batches_pending.append(name)
    elif st.succeeded:
        _collect(store, gem, key, name, ids, s)
    else:
        log.warning("batch %s ended %s; its traces will be submitted again", name, st.state)
        _set_batch_state(store, name, st.state)


def _resume_batches(
    store: Store, gem: GeminiJudge, key: str, s: JudgeSummary, wait: bool, poll_interval_s: float
) -> None:
    rows = store.run(
        "SELECT batch_name, trace_ids FROM judge_batches WHERE judge_key = ? AND state = ? "
        "ORDER BY submitted_at, batch_name",
        [key, BATCH_SUBMITTED],
    )
    for name, ids in rows:
        s.batches_resumed.append(name)
        _settle_batch(store, gem, key, name, json.loads(ids), s, wait, poll_interval_s)


def _submit_batches(
    store: Store, gem: GeminiJudge, key: str, todo: Sequence[str], s: JudgeSummary,
    wait: bool, poll_interval_s: float, batch_size: int,
) -> None:
    jobs: list[tuple[str, Sequence[str]]] = []
    for part in _chunks(todo, batch_size):
        reqs = load_requests(store, part)
        inlined, local = gem.build_batch_requests(reqs)
        if not inlined:  # every trace is empty or over budget: known without a call
            _commit(store, gem, key, reqs, local, s)
            continue
        name = gem.submit_batch(reqs, display_name=f"legival-backtracking-{key[:12]}")
        _record_batch(store, name, key, part)
        s.batches_submitted.append(name)
        jobs.append((name, part))
    for name, part in jobs:
        _settle_batch(store, gem, key, name, part, s, wait, poll_interval_s)


# ------------------------------------------------------------------------------------------ lexical


def ensure_lexical(store: Store) -> JudgeSummary:
    """The `lexical` fallback: make sure every trace has its lexical backtracking row (written by the
    efficiency stage, metric "backtracking"); no judge call is ever made."""
    from legival_core.metrics.efficiency import LEXICAL_BACKTRACKING_VERSION
    from legival_core.stages.efficiency import compute_efficiency

    params = canonical_json({"segmenter": SEGMENTER_VERSION})
    total = store.count("traces")
    missing = store.traces_missing_metric("backtracking", params, LEXICAL_BACKTRACKING_VERSION).height
    s = JudgeSummary(judge=LEXICAL, model=LEXICAL, judge_key=content_hash(params, LEXICAL_BACKTRACKING_VERSION))
    s.selected, s.cached, s.todo = total, total - missing, missing
    if missing:
        compute_efficiency(store)
        s.ok = missing
    return s


# ---------------------------------------------------------------------------------------- agreement


@dataclass(frozen=True, slots=True)
class StoredCounts:
    """A judge's per-trace backtracking counts (distinct flagged steps of its `ok` results)."""

    judge_key: str
    judge: str
    model: str
    counts: dict[str, int]
    datasets: dict[str, str]


def stored_judge_counts(store: Store, trace_ids: Sequence[str], key: str | None = None) -> StoredCounts:
    """Counts for `trace_ids` from one judge key: the given one (a unique prefix is enough), else the
    only key with `ok` results for these traces; ValueError names the candidates when ambiguous."""
    ids = list(trace_ids)
    keys = store.run(
        "SELECT judge_key, any_value(judge), any_value(model), count(*) FROM judge_results "
        "WHERE status = 'ok' AND list_contains(?, trace_id) GROUP BY judge_key ORDER BY judge_key",
        [ids],
    )
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
    rows = store.run(
        "SELECT trace_id, flagged_steps FROM judge_results WHERE status = 'ok' AND judge_key = ? "
        "AND list_contains(?, trace_id)",
        [k, ids],
    )
    ds = store.run("SELECT trace_id, dataset FROM traces WHERE list_contains(?, trace_id)", [ids])
    return StoredCounts(
        k, j, m, {t: len(set(json.loads(f or "[]"))) for t, f in rows}, {t: d for t, d in ds}
    )
