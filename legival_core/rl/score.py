"""The one scoring core: a batch of completions in, per item the reward and every component out
(docs/reward.md). Built on the benchmark's own code, so a completion scored here and the same text
ingested as a trace and run through `legival transfer` / `efficiency` give the same numbers:

- the reasoning is the thinking section (`thinking.split_thinking`, as ingest reads a raw response;
  no markers: the whole completion), its steps Punkt's (`segment.segment`, SPEC §1);
- correct: the dataset's grader, the LAST answer (SPEC §2); format: the student extractor's FIRST
  explicit answer, never a bare number;
- transfer: the transfer stage's own rollouts (`stages.transfer.rollout_chunk`: the dataset prompt,
  the first-answer stop, the forcing pass, the grading) on the depths `plan_trace` plans, and FOTU by
  `transfer.utility.trace_transfer` (SPEC §4), for correct completions only;
- length, redundancy, backtracking: `token_count`, `metrics.redundancy`, `metrics.backtracking`.

A batch's rollouts go to each student in ONE generate call, so the completions of a GRPO group, and
of the concurrent requests a server batches together, share the engine's batches; each completion's
depths share its prefix (`GenerationRequest.group`). A completion with no reasoning, no answer or an
overflowing prefix gets a defined value with its reason; an item that is no item was refused before
(`items.ItemError`), alone.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from legival_core.datasets.base import get_dataset
from legival_core.metrics.backtracking import lexical_backtracking
from legival_core.metrics.redundancy import max_prev_similarity, redundancy
from legival_core.rl.items import Item, ItemError
from legival_core.run_config import Efficiency
from legival_core.run_config.reward import RewardSpec
from legival_core.segment import segment
from legival_core.stages.transfer import TransferSummary, TransferTrace, rollout_chunk
from legival_core.thinking import split_thinking
from legival_core.token_count import token_len
from legival_core.transfer.rollout_plan import StudentConfig, plan_trace
from legival_core.transfer.students import make_student_backend
from legival_core.transfer.utility import trace_transfer
from legival_core.types import Problem, Steps, canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.backends.base import TextBackend

EMBED_MEMO = 50_000
"""Sentences the scorer's embedder remembers at most (a server scores for days: bounded memory)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One component of one item: `value` in [0, 1], higher better (None: unavailable, `reason`
    says why); `raw` the metric it comes from (FOTU, tokens, redundancy...); `reason` also says why a
    defined value was given (an incorrect completion's transfer, no reasoning, an overflow)."""

    value: float | None
    raw: float | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "raw": self.raw, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Scored:
    """One item's result. `error` set: the item was refused (nothing else is)."""

    key: str | None
    reward: float | None
    components: dict[str, Part] = field(default_factory=dict)
    correct: bool | None = None
    watch: Part | None = None
    error: str | None = None
    reason: str | None = None
    """Why `reward` is None when the item was scored (a weighed component unavailable)."""

    def as_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "correct": self.correct, "error": self.error, "reason": self.reason,
                "components": {n: p.as_dict() for n, p in self.components.items()},
                "watch": self.watch.as_dict() if self.watch is not None else None}


@dataclass(slots=True)
class _Prepared:
    item: Item
    trace_id: str
    problem: Problem
    reasoning: str
    steps: Steps
    correct: bool
    unparsed: bool
    explicit: bool


class Scorer:
    """Scores batches under one reward spec; students load on first use (`backends` may give them).
    Thread-safe: one batch at a time."""

    def __init__(self, spec: RewardSpec, backends: Mapping[str, TextBackend] | None = None, log: bool = True) -> None:
        self.spec = spec
        self.dataset = get_dataset(spec.dataset)
        self.spec_hash = spec.spec_hash()
        t = spec.components.transfer
        self.configs: dict[str, StudentConfig] = {}
        if t is not None:
            self.configs["transfer"] = t.student_config()
            if spec.watch is not None:
                self.configs["watch"] = t.student_config(spec.watch.student)
        self._backends: dict[str, TextBackend] = dict(backends or {})
        self._lock = threading.Lock()
        self._embedder: Any = None
        self.summaries: dict[str, TransferSummary] = {}
        """The last batch's rollout accounting per student role (prefill computed/cached, tokens)."""
        self._journal: Any = None
        if log and spec.store is not None:
            from legival_core.store.journal import Journal

            self._journal = Journal(spec.store)

    # --- engines ----------------------------------------------------------------------------------------

    def backend(self, role: str) -> TextBackend:
        if role not in self._backends:
            self._backends[role] = make_student_backend(self.configs[role])
        return self._backends[role]

    def close(self) -> None:
        for b in self._backends.values():
            close = getattr(b, "close", None)
            if close is not None:
                close()
        self._backends.clear()
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    # --- scoring -------------------------------------------------------------------------------------------

    def score(self, items: Sequence[Item | ItemError]) -> list[Scored]:
        """Every item's result, in order (module docstring)."""
        with self._lock:
            prepared: list[_Prepared | None] = []
            refused: dict[int, str] = {}
            for i, it in enumerate(items):
                if isinstance(it, ItemError):
                    refused[i] = str(it)
                    prepared.append(None)
                elif len(it.completion) > self.spec.max_completion_chars:
                    refused[i] = (f"completion: {len(it.completion):,} characters, over the reward spec's "
                                  f"max_completion_chars ({self.spec.max_completion_chars:,})")
                    prepared.append(None)
                else:
                    prepared.append(self._prepare(it))
            ready = [p for p in prepared if p is not None]
            parts: dict[str, dict[str, Part]] = {p.trace_id: {} for p in ready}
            self._efficiency(ready, parts)
            fotu = {role: self._transfer(role, ready) for role in self.configs}
            out: list[Scored] = []
            for i, p in enumerate(prepared):
                if p is None:
                    item = items[i]
                    out.append(Scored(item.key if isinstance(item, Item) else None, None, error=refused[i]))
                    continue
                mine = parts[p.trace_id]
                mine["correct"] = Part(1.0 if p.correct else 0.0, None, "no answer found (unparsed)" if p.unparsed else None)
                mine["format"] = Part(1.0 if p.explicit else 0.0, None,
                                      None if p.explicit else "no explicit answer in the dataset's format")
                if "transfer" in fotu:
                    mine["transfer"] = fotu["transfer"][p.trace_id]
                out.append(self._combine(p, mine, fotu.get("watch", {}).get(p.trace_id)))
            self._log(out, items)
            return out

    def _prepare(self, it: Item) -> _Prepared:
        split = split_thinking(it.completion)
        gold = self.dataset.gold_text(it.gold)  # GSM8K's own `answer` column: the number after `####`
        problem = Problem(self.dataset.name, content_hash(it.question, gold)[:16], it.question, gold)
        grade = self.dataset.grader(split.answer_text, split.reasoning, problem, "teacher")
        explicit = self.dataset.grader(it.completion, "", problem, "student").status != "unparsed"
        trace_id = content_hash("reward", self.dataset.name, problem.problem_id, split.reasoning, split.answer_text)
        return _Prepared(it, trace_id, problem, split.reasoning, segment(split.reasoning), bool(grade.correct),
                         grade.status == "unparsed", explicit)

    def _efficiency(self, ready: Sequence[_Prepared], parts: dict[str, dict[str, Part]]) -> None:
        c = self.spec.components
        if c.length is not None:
            for p in ready:
                size = float(token_len(p.reasoning) if c.length.unit == "tokens" else p.steps.m)
                parts[p.trace_id]["length"] = Part(1.0 if size <= c.length.target else c.length.target / size, size,
                                                   "no reasoning" if size == 0 else None)
        if c.backtracking is not None:
            for p in ready:
                b = lexical_backtracking(p.steps) if p.steps.m else 0.0
                parts[p.trace_id]["backtracking"] = Part(1.0 - b, b, None if p.steps.m else "no reasoning steps")
        if c.redundancy is not None:
            self._redundancy(ready, parts, c.redundancy.tau)

    def _redundancy(self, ready: Sequence[_Prepared], parts: dict[str, dict[str, Part]], tau: float) -> None:
        sentences = [p.steps.sentences() for p in ready]
        flat = [s for ss in sentences for s in ss]
        try:
            vectors = self._embed(flat) if flat else None
        except Exception as e:  # noqa: BLE001 - the model is not here: unavailable, never a made-up number
            for p in ready:
                parts[p.trace_id]["redundancy"] = Part(None, None, f"unavailable: the embedding model cannot run "
                                                                   f"({type(e).__name__}: {e})"[:300])
            return
        at = 0
        for p, ss in zip(ready, sentences, strict=True):
            r = redundancy(max_prev_similarity(vectors[at:at + len(ss)]), tau) if len(ss) >= 2 and vectors is not None else 0.0
            at += len(ss)
            parts[p.trace_id]["redundancy"] = Part(1.0 - r, r, None if p.steps.m >= 2 else "fewer than 2 steps")

    def _embed(self, sentences: list[str]) -> Any:
        if self._embedder is None:
            from legival_core.embed import Embedder

            e = Efficiency()
            self._embedder = Embedder(e.model, e.embed_backend, e.embed_precision, memo_limit=EMBED_MEMO)
        return self._embedder.embed(sentences).vectors

    def _transfer(self, role: str, ready: Sequence[_Prepared]) -> dict[str, Part]:
        """FOTU of every correct completion with steps under the role's student (SPEC §4); the defined
        values of the others."""
        t = self.spec.components.transfer
        assert t is not None
        config = self.configs[role]
        out: dict[str, Part] = {}
        units = []
        for p in ready:
            if not p.correct:
                out[p.trace_id] = Part(t.incorrect, None, "incorrect: SPEC §4 rolls out correct traces only")
            elif p.steps.m < 1:
                out[p.trace_id] = Part(t.incorrect, None, "no reasoning steps: no prefix to continue")
            else:
                trace = TransferTrace(p.trace_id, "reward", self.dataset.name, p.problem, p.steps)
                units.append((trace, plan_trace(p.trace_id, p.steps, config)))
        summary = TransferSummary()
        rows = rollout_chunk(self.backend(role), config, units, summary) if units else []
        self.summaries[role] = summary
        by_trace: dict[str, dict[int, float]] = {}
        for r in rows:
            if r["status"] == "ok":
                by_trace.setdefault(r["trace_id"], {})[int(r["k"])] = 1.0 if r["correct"] else 0.0
        for trace, _plans in units:
            got = trace_transfer(by_trace.get(trace.trace_id, {}), trace.steps.m, config.n_bins)
            if got.fotu is None:
                out[trace.trace_id] = Part(t.incorrect, None, "overflow: a prefix does not fit the student's context")
            else:
                out[trace.trace_id] = Part(float(got.fotu), float(got.fotu))
        return out

    def _combine(self, p: _Prepared, parts: dict[str, Part], watch: Part | None) -> Scored:
        weighed = self.spec.components.weighed()
        missing = [n for n in weighed if parts[n].value is None]
        if missing:
            reward, reason = None, "; ".join(f"{n} {parts[n].reason}" for n in missing)
        elif self.spec.combine.gate_on_correct and not p.correct:
            reward, reason = 0.0, None
        else:
            reward = float(sum(w.weight * (parts[n].value or 0.0) for n, w in weighed.items()))
            reason = None
        shown = {n: parts[n] for n in weighed}
        return Scored(p.item.key, reward, shown, p.correct, watch, None, reason)

    # --- the log (the Goodhart watch's data) -----------------------------------------------------------------

    def _log(self, out: Sequence[Scored], items: Sequence[Item | ItemError]) -> None:
        if self._journal is None:
            return
        rows = log_rows(self.spec.name, self.spec_hash, items, out)
        if rows:
            self._journal.append("reward_log", rows)


def log_rows(name: str, spec_hash: str, items: Sequence[Item | ItemError], out: Sequence[Scored]) -> list[dict[str, Any]]:
    """The `reward_log` rows of a scored batch (refused items are not logged: they have no key)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = []
    for s, it in zip(out, items, strict=True):
        if not isinstance(it, Item) or s.key is None or s.error is not None:
            continue
        rows.append({"log_key": s.key, "reward_name": name, "spec_hash": spec_hash, "source": it.source,
                     "step": it.step, "tag": it.tag, "group_id": it.group, "reward": s.reward, "correct": s.correct,
                     "transfer": s.components["transfer"].value if "transfer" in s.components else None,
                     "watch": s.watch.value if s.watch is not None else None,
                     "components": canonical_json({n: p.as_dict() for n, p in s.components.items()}),
                     "error": s.error, "scored_at": now})
    return rows
