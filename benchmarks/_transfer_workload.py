"""The transfer benchmarks' workload (issue 3), built with the product's own pieces so the numbers are
those of real rollouts: correct GSM8K traces from ../shared/data with at least `min_steps` steps
(legival_core's segmenter), the planner's depths and prefixes (`plan_trace`, SPEC profile), the
dataset's student prompt, the chat template with `continue_final_message`, and the SPEC's
first-answer stop rule. One request group per trace, depths ascending.
"""

from __future__ import annotations

import argparse
import glob
import json
from dataclasses import dataclass
from pathlib import Path

from legival_core.backends.base import Completion, GenerationRequest, TextBackend
from legival_core.backends.stop_rules import StopRuleSpec
from legival_core.datasets.base import get_dataset
from legival_core.run_config import student_config
from legival_core.segment import segment
from legival_core.transfer.rollout_plan import plan_trace, student_messages
from legival_core.types import Steps

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "reasoning_traces" / "gsm8k"


@dataclass(frozen=True, slots=True)
class BenchTrace:
    trace_id: str
    question: str
    steps: Steps


def load_traces(limit: int, min_steps: int) -> list[BenchTrace]:
    """The first `limit` correct traces with >= `min_steps` steps, in file order (stable)."""
    files = sorted(glob.glob(str(TRACES / "*.jsonl")))
    if not files:
        raise SystemExit(f"no traces under {TRACES}: this benchmark needs ../shared/data")
    traces: list[BenchTrace] = []
    for path in files:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            text = rec.get("reasoning") or ""
            if rec.get("correct") is not True or not text:
                continue
            steps = segment(text)
            if steps.m >= min_steps:
                traces.append(BenchTrace(f"{rec['model']}/{rec['problem_id']}", rec["problem"], steps))
                if len(traces) >= limit:
                    return traces
    return traces


def build_requests(
    backend: TextBackend, traces: list[BenchTrace], max_new_tokens: int, step_interval: int
) -> list[GenerationRequest]:
    spec = get_dataset("gsm8k")
    config = student_config(max_new_tokens=max_new_tokens, step_interval=step_interval)
    rule = StopRuleSpec("first_answer", spec.name)
    requests = []
    for t in traces:
        for p in plan_trace(t.trace_id, t.steps, config):
            prompt = backend.render_chat(student_messages(spec.system_prompt, t.question, p.prefix), True)
            requests.append(GenerationRequest(f"{t.trace_id}:{p.k}", prompt, max_new_tokens, t.trace_id, rule))
    return requests


def workload_parser(description: str | None) -> argparse.ArgumentParser:
    """The transfer benchmarks' command line with the workload's options; each benchmark adds its backend's."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=10, help="number of traces (default 10)")
    parser.add_argument("--min-steps", type=int, default=30)
    parser.add_argument("--step-interval", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    return parser


def workload(backend: TextBackend, args: argparse.Namespace) -> list[GenerationRequest]:
    """The rollout requests of the traces `args` ask for, rendered for `backend`; says how many."""
    traces = load_traces(args.limit, args.min_steps)
    requests = build_requests(backend, traces, args.max_new_tokens, args.step_interval)
    print(f"{len(traces)} traces, {len(requests)} rollouts, max_new_tokens {args.max_new_tokens}")
    return requests


def token_summary(done: list[Completion], seconds: float, max_new_tokens: int) -> str:
    """Rollouts/s, prefill computed/requested, decode tokens, and decode tokens the first-answer stop
    saved (budget minus tokens used, over rollouts the rule ended)."""
    requested = sum(c.prompt_tokens for c in done)
    computed = sum(c.prefill_computed for c in done)
    decoded = sum(c.completion_tokens for c in done)
    saved = sum(max_new_tokens - c.completion_tokens for c in done if c.finish_reason == "rule")
    reasons = {r: sum(c.finish_reason == r for c in done) for r in ("rule", "stop", "length", "overflow")}
    return (
        f"{len(done)} rollouts in {seconds:.1f} s = {len(done) / seconds:.3f} rollouts/s | "
        f"prefill computed/requested {computed}/{requested} = {computed / max(requested, 1):.3f} | "
        f"decode tokens {decoded} ({decoded / seconds:.1f} tok/s) | saved by first-answer stop {saved} | {reasons}"
    )
