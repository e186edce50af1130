"""Validate a GPU node for Legi-Val in one command: the vLLM offline backend doing teacher generation
and student rollouts with prefix caching, with throughput and the prefix-cache hit rate.

    python infra/gpu_check.py                          # SmolLM2-135M export as teacher and student
    python infra/gpu_check.py --teacher-model Qwen/Qwen3-8B --student-model /models/smollm2 \
        --problems ../shared/data/gsm8k/test.jsonl --n-problems 64 --max-new-tokens 2048
    python infra/gpu_check.py --cpu-smoke              # no GPU: vllm-cpu in .venv-vllm, tiny sizes

Phase 1 generates teacher traces for GSM8K problems (dataset system prompt, model chat template, the
model config's recommended sampling seeded per problem, or `--greedy`) and splits their reasoning (`legival_core.generation.extract_reasoning`). Phase 2 rolls the
student out on prefixes of those traces at the SPEC depths K = {0, s, 2s, ..., m} with
`continue_final_message`, grouped per trace so that vLLM's automatic prefix caching serves the shared
prompt. It prints one JSON line: tokens/s of each phase, the per-request cache hit rate
(cached prompt tokens / prompt tokens) and vLLM's engine counters (prefix_cache_hits / queries).
Nothing is written to a store; `--out FILE` saves the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Python puts this script's folder first on sys.path, and infra/vllm/ (deployment files) would then
# shadow the vllm package as a namespace package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))
FIXTURE = REPO / "tests" / "fixtures" / "datasets" / "gsm8k" / "test.jsonl"


def make_backend(model: str | None, cpu: bool, max_model_len: int) -> Any:
    """The registered "vllm" backend (model None: the shipped SmolLM2 export)."""
    from legival_core.backends.base import make_backend as make_registered

    options: dict[str, Any] = {"max_model_len": max_model_len}
    if cpu:
        # One process for the engine: by default vllm-cpu spawns an engine core and a worker process,
        # each importing vLLM and torch again (~25 s of a CPU smoke run on 2 cores).
        options |= {"enforce_eager": True, "engine_kwargs": {"distributed_executor_backend": "uni"},
                    "env": {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}
    return make_registered("vllm", model, None, options)


def teacher_phase(backend: Any, problems: list[Any], max_new_tokens: int,
                  decoding: dict[str, Any]) -> tuple[list[tuple[Any, str]], dict[str, Any]]:
    from legival_core.backends.base import ChatMessage, GenerationRequest
    from legival_core.datasets.base import get_dataset
    from legival_core.generation.extract import extract_reasoning
    from legival_core.stages.generate import problem_sampling

    spec = get_dataset("gsm8k")
    prompts = [backend.render_chat([ChatMessage("system", spec.system_prompt), ChatMessage("user", p.question)], False)
               for p in problems]
    reqs = [GenerationRequest(f"t{i}", pr, max_new_tokens, group=f"t{i}",
                              sampling=problem_sampling(decoding, p.problem_id))
            for i, (p, pr) in enumerate(zip(problems, prompts, strict=True))]
    t0 = time.perf_counter()
    outs = backend.generate(reqs)
    dt = time.perf_counter() - t0
    traces, truncated = [], 0
    for p, pr, c in zip(problems, prompts, outs, strict=True):
        ex = extract_reasoning(c.text, c.finish_reason, pr)
        truncated += ex.truncated
        traces.append((p, ex.reasoning))
    ntok = sum(c.completion_tokens for c in outs)
    return traces, {"requests": len(outs), "decoding": decoding, "completion_tokens": ntok, "seconds": round(dt, 2),
                    "tokens_per_s": round(ntok / dt, 1) if dt else None, "truncated": truncated}


def student_phase(backend: Any, traces: list[tuple[Any, str]], max_new_tokens: int, step_interval: int) -> dict[str, Any]:
    from legival_core.backends.base import GenerationRequest
    from legival_core.datasets.base import get_dataset
    from legival_core.segment import segment
    from legival_core.transfer.depths import rollout_depths
    from legival_core.transfer.rollout_plan import student_messages

    spec = get_dataset("gsm8k")
    reqs = []
    for i, (p, reasoning) in enumerate(traces):
        steps = segment(reasoning)
        if steps.m < 1:
            continue
        for k in rollout_depths(steps.m, step_interval):
            prompt = backend.render_chat(student_messages(spec.system_prompt, p.question, steps.prefix(k)), True)
            reqs.append(GenerationRequest(f"s{i}-{k}", prompt, max_new_tokens, group=f"trace{i}"))
    before = _counters(backend)
    t0 = time.perf_counter()
    outs = backend.generate(reqs)
    dt = time.perf_counter() - t0
    after = _counters(backend)
    prompt = sum(c.prompt_tokens for c in outs)
    cached = sum(c.prefill_cached for c in outs)
    ntok = sum(c.completion_tokens for c in outs)
    res: dict[str, Any] = {"requests": len(outs), "completion_tokens": ntok, "prompt_tokens": prompt,
                           "seconds": round(dt, 2), "tokens_per_s": round(ntok / dt, 1) if dt else None,
                           "request_cache_hit_rate": round(cached / prompt, 4) if prompt else None,
                           "overflow": sum(c.finish_reason == "overflow" for c in outs)}
    if before is not None and after is not None:
        hits, queries = after[0] - before[0], after[1] - before[1]
        res |= {"engine_prefix_cache_hits": hits, "engine_prefix_cache_queries": queries,
                "engine_cache_hit_rate": round(hits / queries, 4) if queries else None}
    return res


def _counters(backend: Any) -> tuple[int, int] | None:
    fn = getattr(backend, "prefix_cache_counters", None)
    if fn is None:
        return None
    c = fn()
    return int(c.hits), int(c.queries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher-model", default=None, help="hub id or local dir (default: SmolLM2-135M export)")
    ap.add_argument("--student-model", default=None, help="default: the same as the teacher")
    ap.add_argument("--problems", type=Path, default=FIXTURE, help="GSM8K test.jsonl")
    ap.add_argument("--n-problems", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=512, help="teacher budget")
    ap.add_argument("--student-max-new-tokens", type=int, default=256)
    ap.add_argument("--step-interval", type=int, default=3)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--cpu-smoke", action="store_true", help="vllm-cpu (.venv-vllm bridge), tiny sizes")
    ap.add_argument("--greedy", action="store_true", help="teacher decodes greedily (default: its model config's "
                    "recommended sampling, configs/models)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from legival_core.catalog import SMOLLM2
    from legival_core.datasets.gsm8k import load_gsm8k
    from legival_core.generation.config import load_model_config
    from legival_core.stages.generate import applied_decoding

    if args.cpu_smoke:
        import importlib.util

        from legival_core.backends.vllm_bridge import vllm_venv_ready

        if importlib.util.find_spec("vllm") is None and not vllm_venv_ready():
            print(json.dumps({"status": "skipped", "reason": "no vllm and no .venv-vllm (scripts/setup_vllm_cpu.sh)"}))
            return 0
        args.n_problems = min(args.n_problems, 2)
        args.max_new_tokens = min(args.max_new_tokens, 32)
        args.student_max_new_tokens = min(args.student_max_new_tokens, 8)
        args.max_model_len = min(args.max_model_len, 2048)
    problems = list(load_gsm8k(args.problems))[: args.n_problems]
    report: dict[str, Any] = {"teacher_model": args.teacher_model or "smollm2-135m-export",
                              "student_model": args.student_model or args.teacher_model or "smollm2-135m-export",
                              "n_problems": len(problems), "cpu_smoke": args.cpu_smoke}
    try:
        import torch

        report["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        report["cuda"] = None
    t0 = time.perf_counter()
    teacher = make_backend(args.teacher_model, args.cpu_smoke, args.max_model_len)
    report["teacher_load_s"] = round(time.perf_counter() - t0, 1)
    try:
        cfg = load_model_config(None, args.teacher_model or SMOLLM2)
        decoding = applied_decoding(args.max_new_tokens, {}, None if args.greedy else cfg.decoding)
        traces, report["teacher"] = teacher_phase(teacher, problems, args.max_new_tokens, decoding)
        same = args.student_model in (None, args.teacher_model)
        student = teacher if same else None
        if student is None:
            teacher.close()
            t0 = time.perf_counter()
            student = make_backend(args.student_model, args.cpu_smoke, args.max_model_len)
            report["student_load_s"] = round(time.perf_counter() - t0, 1)
        report["student"] = student_phase(student, traces, args.student_max_new_tokens, args.step_interval)
        if student is not teacher:
            student.close()
    finally:
        teacher.close()
    report["status"] = "ok"
    line = json.dumps(report, sort_keys=True)
    if args.out:
        args.out.write_text(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
