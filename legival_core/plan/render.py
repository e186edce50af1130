"""The plan as rows (the terminal table) and as markdown (the Prefect artifact): one source of both."""

from __future__ import annotations

from typing import Any

from legival_core.plan.model import BenchmarkPlan

SHARD_HEADERS = ("teacher", "dataset", "student", "traces", "rollouts", "cached", "to do", "prompt tok",
                 "computed", "decode", "chunks", "engine s")
"""`computed`: prompt tokens left after prefix sharing; `decode`: the decode budget of the rollouts to do
(the JSON summary also has the expected decode from stored rollouts, and the forcing budget); `engine s`:
the engine seconds the cost model expects of the shard's rollouts (`legival_core.plan.timing`)."""


def _n(v: int | float | None) -> str:
    """Compact: 9,999 / 12.3k / 4.56M (the JSON summary has the exact figures)."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.2f}G"
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:,.0f}"


def shard_rows(plan: BenchmarkPlan) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [(s.teacher, s.dataset, s.student, _n(s.transfer_traces), _n(s.rollouts_total), _n(s.rollouts_cached),
             _n(s.rollouts_missing), _n(s.prompt_tokens), _n(s.prompt_tokens_computed), _n(s.decode_budget),
             _n(s.chunks), _n(s.seconds)) for s in plan.shards]
    t = plan.totals()
    rows.append(("total", "", "", _n(t["transfer_traces"]), _n(t["rollouts_total"]), _n(t["rollouts_cached"]),
                 _n(t["rollouts_missing"]), _n(t["prompt_tokens"]), _n(t["prompt_tokens_computed"]),
                 _n(t["decode_budget"]), _n(sum(s.chunks for s in plan.shards)), _n(_seconds(plan.shards))))
    return rows


def _seconds(shards: list[Any]) -> float | None:
    """Engine seconds of shards (None when any has no estimate)."""
    known = [s.seconds for s in shards]
    return None if any(v is None for v in known) else sum(known)


GROUP_HEADERS = ("traces", "rollouts", "to do", "prompt tok", "decode", "engine s")


def grouped_rows(plan: BenchmarkPlan, keys: tuple[str, ...]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The shards summed by `keys` (e.g. ("teacher",)), in first-seen order, and a total row."""
    groups: dict[tuple[str, ...], list[Any]] = {}
    for s in plan.shards:
        groups.setdefault(tuple(getattr(s, k) for k in keys), []).append(s)

    def cells(shards: list[Any]) -> tuple[str, ...]:
        counts = (sum(getattr(s, f) for s in shards) for f in ("transfer_traces", "rollouts_total", "rollouts_missing",
                                                                "prompt_tokens", "decode_budget"))
        return (*(_n(v) for v in counts), _n(_seconds(shards)))

    rows = [(*k, *cells(shards)) for k, shards in groups.items()]
    rows.append(("total", *([""] * (len(keys) - 1)), *cells(list(plan.shards))))
    return (*keys, *GROUP_HEADERS), rows


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def span(tm: Any) -> str:
    """One number when the rates are measured or calibrated, else the range their basis implies."""
    if tm.low_s is None or tm.high_s is None or tm.low_s >= tm.high_s:
        return duration(tm.seconds)
    return f"{duration(tm.low_s)} to {duration(tm.high_s)} ({duration(tm.seconds)} at the row's figures)"


def summary_lines(plan: BenchmarkPlan) -> list[str]:
    """What is not in the shard table: traces, generation, embedding, judge, quality, time and sources."""
    t = plan.totals()
    out = [f"traces: {plan.traces_stored:,} stored, {plan.traces_new:,} to ingest"]
    if t["rollouts_missing"]:
        expected = t["expected_decode"]
        out.append(f"rollouts: {t['rollouts_missing']:,} to generate of {t['rollouts_total']:,} "
                   f"({t['rollouts_cached']:,} cached) in {t['shards_with_work']} shard(s); decode budget "
                   f"{t['decode_budget']:,} tokens (+ at most {t['forcing_budget']:,} forcing)"
                   + (f", expected ~{expected:,} from the stored rollouts" if expected is not None else ""))
        out.append(f"prompt tokens: {t['prompt_tokens']:,} requested, {t['prompt_tokens_computed']:,} computed "
                   f"after prefix sharing; {sum(s.chunks for s in plan.shards):,} chunks")
    times = {t.student: t for t in plan.generation_times}
    for teacher in dict.fromkeys(g.teacher for g in plan.generation):
        gens = [g for g in plan.generation if g.teacher == teacher]
        tm = times.get(teacher)
        when = "" if tm is None else (f"; time unavailable ({tm.unavailable})" if tm.unavailable else
                                      f"; at most {span(tm)}, {tm.gpu_hours:,.1f} GPU-hours ({tm.basis})")
        out.append(f"generate {teacher} ({gens[0].model}): up to "
                   + ", ".join(f"{g.problems:,} {g.dataset}" for g in gens)
                   + f" problems, decode budget {sum(g.decode_budget for g in gens):,} tokens{when}")
    if plan.generation:
        out.append("generation: cached generations are skipped at run time; times are at the full decode "
                   "budget (an upper bound)")
    out.append(f"efficiency: {plan.traces_missing_efficiency:,} traces, {plan.sentences_to_embed:,} sentences to "
               f"embed ({plan.embedding_model})")
    j = plan.judge
    if j:
        extra = f", ~{j.get('input_tokens', 0):,} input / ~{j.get('output_tokens', 0):,} output tokens" \
            if "input_tokens" in j else ""
        out.append(f"judge {j.get('name')}: {t['judge_calls']:,} calls, estimated ${t['judge_cost_usd']:.2f}{extra}"
                   + (f" ({j['note']})" if j.get("note") else ""))
    else:
        out.append("judge: disabled in the spec")
    out.extend(_monitorability_lines(plan.monitorability))
    if plan.quality:
        out.append("quality: " + ", ".join(f"{g} {n:,} traces" for g, n in plan.quality.items()))
    for name, c in plan.stages.items():
        out.append(f"{name}: {c['units']:,} to compute, {c['stored']:,} stored")
    for student, source in plan.prompt_tokenizer.items():
        out.append(f"prompt tokens of {student}: {source}")
    for tm in plan.times:
        if tm.unavailable:
            out.append(f"time of {tm.student}: unavailable ({tm.unavailable})")
            continue
        if not tm.compute_s:
            out.append(f"time of {tm.student}: nothing to roll out (rates {tm.basis}: {tm.source})")
            continue
        out.append(f"time of {tm.student} on {tm.engines} x {tm.accelerator} engine(s): {span(tm)} (engine start "
                   f"{duration(tm.load_s)} + {duration(tm.compute_s)} of rollouts in engine time), "
                   f"{tm.gpu_hours:,.2f} GPU-hours; rates {tm.basis}: {tm.source}")
        if tm.decode:
            out.append(f"decode of {tm.student}: {tm.decode}")
    if len([tm for tm in plan.times if tm.seconds is not None]) > 1:
        out.append(f"transfer time (students take turns): {duration(t['estimated_wall_s'])}")
    out.extend(f"note: {n}" for n in plan.notes)
    return out


def markdown(plan: BenchmarkPlan) -> str:
    """The plan as a markdown artifact: the shard table and the summary lines."""

    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    lines = [f"# Plan of {esc(plan.spec)}", "", "| " + " | ".join(SHARD_HEADERS) + " |",
             "|" + "---|" * len(SHARD_HEADERS)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in shard_rows(plan)]
    lines += [""] + [f"- {esc(x)}" for x in summary_lines(plan)]
    return "\n".join(lines) + "\n"


def _monitorability_lines(m: dict[str, Any]) -> list[str]:
    """Hint interventions: samples, then each monitor's verdicts (and an LLM monitor's calls and cost)."""
    if not m:
        return []
    sm = m["samples"]
    out = [f"interventions: {sm['to_generate']:,} samples to generate of {sm['total']:,} ({sm['stored']:,} stored)"
           + (f"; {sm['skipped_no_target']:,} problem(s) without a wrong-answer target" if sm["skipped_no_target"] else "")]
    for mon in m["monitors"]:
        line = f"hint monitor {mon['name']} ({mon['kind']}): {mon['to_ask']:,} verdicts to ask of {mon['verdicts']:,}"
        if mon["kind"] == "llm":
            line += (f"; {mon['calls']:,} calls, ~{mon['input_tokens']:,} input / ~{mon['output_tokens']:,} output "
                     f"tokens, estimated ${mon['cost_usd']:.2f} (docs/monitorability.md \"Plan and cost\")")
        out.append(line)
    return out
