"""The reward server's cost (issue 47; docs/reward.md "Speed and memory"), every ratio measured in one run
on one machine:

- overhead: 64 GSM8K completions (8 groups of 8, ~300 tokens, 3 depths each, the embedded SmolLM2
  student) scored through `legival reward serve` (8 concurrent requests, one group each) against the
  same rollouts generated directly with the same engine in this process (the transfer stage's own
  `rollout_chunk`, the same prompts and caps);
- group sharing: prefill tokens per group without prefix sharing, with the engine's one level (each
  completion's depths share its prefix), and with two levels (the group's prompt shared too,
  estimated from the k = 0 prompts), and the second level's share of the direct time;
- batching: 16 one-item requests, one at a time, against 4 concurrent clients sending the same;
- memory: the replica's resident set before and after 500 small requests.

    .venv/bin/python benchmarks/reward.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._measure import load_average, machine_at_start  # noqa: E402

TRACES = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
STEPS = 14
"""Sentences per completion: with a depth interval of 7, the depths {0, 7, 14}."""


def workload(groups: int, per_group: int) -> list[dict[str, Any]]:
    """`groups` problems x `per_group` completions: real teachers' reasoning cut to STEPS sentences, then
    the gold answer (every completion correct, so every one is rolled out)."""
    from legival_core.segment import segment

    rows = [json.loads(ln) for ln in TRACES.read_text().splitlines()]
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_problem.setdefault(str(r["problem_id"]), []).append(r)
    out = []
    for pid in sorted(by_problem)[:groups]:
        texts = [t for t in (r.get("reasoning") or r.get("response") or "" for r in by_problem[pid]) if t]
        made = []
        for j in range(per_group):
            steps = segment(texts[j % len(texts)])
            start = (j // len(texts)) * 2
            cut = steps.sentences()[start:start + STEPS] if steps.m >= start + STEPS else steps.sentences()[:STEPS]
            made.append(" ".join(cut) + f" The answer is \\boxed{{{by_problem[pid][0]['gold_answer']}}}.")
        out += [{"prompt": by_problem[pid][0]["problem"], "completion": c, "gold": str(by_problem[pid][0]["gold_answer"]),
                 "group": pid} for c in made]
    return out


SPEC = {"name": "bench", "dataset": "gsm8k", "components": {
    "correct": {"weight": 1.0},
    "transfer": {"weight": 0.5, "step_interval": 7, "max_new_tokens": 64,
                 "student": {"name": "smollm2-135m", "backend": "embedded", "model": "smollm2-135m",
                             "backend_options": {"num_threads": 2}}}}}


def direct(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The same rollouts generated with the same engine in this process (after a warm-up call)."""
    from legival_core.rl.items import Item
    from legival_core.rl.score import Scorer
    from legival_core.run_config.reward import parse_reward_spec
    from legival_core.stages.transfer import TransferSummary, TransferTrace, rollout_chunk
    from legival_core.transfer.rollout_plan import plan_trace

    scorer = Scorer(parse_reward_spec(SPEC), log=False)
    prepared = [scorer._prepare(Item(i["prompt"], i["completion"], i["gold"])) for i in items]
    config = scorer.configs["transfer"]
    backend = scorer.backend("transfer")
    units = [(TransferTrace(p.trace_id, "b", "gsm8k", p.problem, p.steps), plan_trace(p.trace_id, p.steps, config))
             for p in prepared]
    rollout_chunk(backend, config, units[:1], TransferSummary())  # warm: the model loaded, caches built
    summary = TransferSummary()
    t0 = time.perf_counter()
    rows = rollout_chunk(backend, config, units, summary)
    seconds = time.perf_counter() - t0
    k0 = {r["trace_id"]: r["prompt_tokens"] for r in rows if r["k"] == 0}
    prefill_t0 = time.perf_counter()
    from legival_core.backends.base import GenerationRequest

    backend.generate([GenerationRequest(f"p{i}", r, 1) for i, r in enumerate(_k0_prompts(backend, prepared))])
    prefill_s = time.perf_counter() - prefill_t0
    scorer.close()
    depths = sorted({len(u[1]) for u in units})
    return {"seconds": seconds, "rollouts": len(rows), "depths_per_completion": depths,
            "prompt_tokens": summary.prefill_computed + summary.prefill_cached,
            "prefill_computed": summary.prefill_computed,
            "k0_tokens": sum(k0.values()), "k0_prefill_s": prefill_s, "decode_tokens": summary.decode_tokens}


def _k0_prompts(backend: Any, prepared: list[Any]) -> list[str]:
    from legival_core.datasets.base import get_dataset
    from legival_core.transfer.rollout_plan import student_messages

    spec = get_dataset("gsm8k")
    return [backend.render_chat(student_messages(spec.system_prompt, p.problem.question, ""), True) for p in prepared]


def _post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def served(items: list[dict[str, Any]], groups: int, tmp: Path) -> dict[str, Any]:
    spec = tmp / "bench.yaml"
    spec.write_text(json.dumps(SPEC))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "legival", "reward", "serve", str(spec), "--port", str(port),
                             "--cpus", "2", "--replica-cpus", "2", "--max-batch", "256"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("http://"):
                break
        warm = {"prompt": "What is 2+3?", "completion": "2 plus 3 is 5. The answer is \\boxed{5}.", "gold": "5"}
        _post(url + "/score", {"items": [warm]})  # the engine loaded
        per = [items[i * (len(items) // groups):(i + 1) * (len(items) // groups)] for i in range(groups)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(groups) as pool:
            got = list(pool.map(lambda b: _post(url + "/score", {"items": b}), per))
        overhead_s = time.perf_counter() - t0
        assert all(r["reward"] is not None for g in got for r in g["results"])
        one = [{"prompt": "Tom has 9 apples and buys 9 more. How many apples does he have?",
                "completion": f"He starts with 9 apples. He buys 9 more, so 9 + 9 = 18. The answer is \\boxed{{18}}. ({i})",
                "gold": "18"} for i in range(16)]
        t0 = time.perf_counter()
        for it in one:
            _post(url + "/score", {"items": [it]})
        sequential_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda it: _post(url + "/score", {"items": [it]}),
                          [{**it, "completion": it["completion"] + " "} for it in one]))
        concurrent_s = time.perf_counter() - t0
        small = {"prompt": "What is 2+3?", "completion": "2 plus 3 is 5. The answer is \\boxed{5}.", "gold": "5"}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: _post(url + "/score", {"items": [{**small, "tag": f"w{i}"}]}), range(50)))
        rss_before = _get(url + "/health")["rss_mib"]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: _post(url + "/score", {"items": [{**small, "tag": f"m{i}"}]}), range(500)))
        rss_after = _get(url + "/health")["rss_mib"]
        return {"seconds": overhead_s, "sequential_s": sequential_s, "concurrent_s": concurrent_s,
                "rss_before_mib": rss_before, "rss_after_mib": rss_after}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--per-group", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    load_start = machine_at_start()
    items = workload(args.groups, args.per_group)
    d = direct(items)
    with tempfile.TemporaryDirectory() as tmp:
        s = served(items, args.groups, Path(tmp))
    per_group = len(items) // args.groups
    one_level = d["prefill_computed"] / args.groups
    two_level = (d["prefill_computed"] - d["k0_tokens"] * (per_group - 1) / per_group) / args.groups
    second_level_s = d["k0_prefill_s"] * (per_group - 1) / per_group
    result = {
        "completions": len(items), "groups": args.groups, "rollouts": d["rollouts"],
        "depths_per_completion": d["depths_per_completion"],
        "direct_s": round(d["seconds"], 2), "served_s": round(s["seconds"], 2),
        "overhead_ratio": round(s["seconds"] / d["seconds"], 3),
        "prefill_tokens_per_group": {"no_sharing": round(d["prompt_tokens"] / args.groups),
                                     "one_level": round(one_level), "two_levels_estimated": round(two_level)},
        "second_level_share_of_direct_time": round(second_level_s / d["seconds"], 4),
        "sequential_s": round(s["sequential_s"], 2), "concurrent_4_clients_s": round(s["concurrent_s"], 2),
        "batching_throughput_ratio": round(s["sequential_s"] / s["concurrent_s"], 3),
        "replica_rss_mib": [s["rss_before_mib"], s["rss_after_mib"]],
        "rss_growth": round(s["rss_after_mib"] / s["rss_before_mib"] - 1, 4) if s["rss_before_mib"] else None,
        "load_start": load_start, "load_end": load_average(),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
