"""The plan of a spec's `monitorability:` section (issue 48, docs/monitorability.md "Plan and cost"):
samples to generate, and per monitor the verdicts to ask and, for an LLM monitor, its calls, tokens and
dollars, without a model.

Counts follow the stages: per (teacher, dataset) the first `limit` problems with a wrong-answer target,
(1 + cues) x `samples` samples (the unhinted arm once, a hinted arm per cue), each read by every monitor
in every scope, a hinted sample for its own cue and an unhinted one for every cue (2 x cues x samples
verdicts per problem and scope). Stored samples are those of the same problems with the same sampling
settings; stored verdicts those of the monitor's key on them.

Cost (an estimate, `llm.cost.estimate_calls` at its default prices): a call's prompt is the monitor's
template with the problem's question as the model saw it (exact) plus the reasoning and answer it reads:
the mean of the stored samples of that teacher and dataset, else the sampling budget `max_new_tokens` x
4 characters (an upper bound). Output tokens: the monitor's `max_output_tokens` per call.
"""

from __future__ import annotations

from typing import Any

from legival_core.datasets.base import get_dataset
from legival_core.llm.cost import DEFAULT_PRICES, estimate_calls
from legival_core.monitor.cues import get_cue
from legival_core.monitor.hint_judge import SYSTEM, llm_prompt
from legival_core.run_config import BenchmarkSpec
from legival_core.stages.hint_monitor import monitor_key
from legival_core.stages.interventions import chosen_teachers, decoding_of
from legival_core.store import Store
from legival_core.store import interventions as reads

CHARS_PER_TOKEN = 4.0


def plan_monitorability(spec: BenchmarkSpec, store: Store, teachers: list[str] | None = None) -> dict[str, Any]:
    """`{}` when the section is off; else `samples` {total, stored, to_generate, skipped_no_target} and
    `monitors`: per monitor {name, kind, verdicts, stored, to_ask, calls, input_tokens, output_tokens,
    cost_usd} (a lexical monitor makes no call: calls and cost 0)."""
    m = spec.monitorability
    if not m.enabled:
        return {}
    keys = {mon.name: monitor_key(mon) for mon in m.monitors}
    samples = {"total": 0, "stored": 0, "to_generate": 0, "skipped_no_target": 0}
    verdicts = {name: {"verdicts": 0, "stored": 0, "chars": 0.0} for name in keys}
    decoding = decoding_of(m)
    for t in chosen_teachers(spec):
        if teachers is not None and t.name not in teachers:
            continue
        g = t.generate
        assert g is not None  # chosen_teachers keeps the generating ones
        for dataset, path in g.jobs(spec.datasets, t.name):
            ds = get_dataset(dataset)
            assert ds.wrong_answer is not None  # the section's validator refuses such a dataset
            targets = [(p, ds.wrong_answer(p, m.seed)) for p in list(ds.load(path, g.format))[: m.limit]]
            kept = [(p, target) for p, target in targets if target is not None]
            samples["skipped_no_target"] += len(targets) - len(kept)
            n = len(kept) * (1 + len(m.cues)) * m.samples
            stored, stored_verdicts, mean_chars = reads.planned_counts(
                store, t.name, dataset, [p.problem_id for p, _ in kept], decoding, list(keys.values()))
            samples["total"] += n
            samples["stored"] += min(stored, n)
            read_chars = mean_chars if mean_chars is not None else m.max_new_tokens * CHARS_PER_TOKEN
            # one problem's prompts: a hinted sample for its cue, an unhinted one for each cue, every scope
            per_problem = sum(len(SYSTEM) + len(llm_prompt(cue, target, question, "", "", scope)) + read_chars
                              for p, target in kept for cue in m.cues for scope in m.scopes
                              for question in (get_cue(cue).hinted(p.question, target), p.question))
            for name, key in keys.items():
                v = verdicts[name]
                v["verdicts"] += 2 * len(kept) * len(m.cues) * m.samples * len(m.scopes)
                v["stored"] += stored_verdicts[key]
                v["chars"] += per_problem * m.samples
    samples["to_generate"] = samples["total"] - samples["stored"]
    return {"samples": samples, "monitors": [_monitor(mon, verdicts[mon.name]) for mon in m.monitors]}


def _monitor(mon: Any, v: dict[str, Any]) -> dict[str, Any]:
    total, stored = int(v["verdicts"]), min(int(v["stored"]), int(v["verdicts"]))
    out: dict[str, Any] = {"name": mon.name, "kind": mon.kind, "verdicts": total, "stored": stored,
                           "to_ask": total - stored, "calls": 0, "input_tokens": 0, "output_tokens": 0,
                           "cost_usd": 0.0}
    if mon.kind == "llm" and total:
        share = (total - stored) / total  # the prompts still to send, at the mean prompt's size
        e = estimate_calls(round(v["chars"] * share), total - stored, DEFAULT_PRICES, chars_per_token=CHARS_PER_TOKEN,
                           output_tokens_per_call=mon.max_output_tokens)
        out |= {"calls": e.calls, "input_tokens": e.input_tokens, "output_tokens": e.output_tokens,
                "cost_usd": round(e.usd, 4), "model": mon.model}
    return out
