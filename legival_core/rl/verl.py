"""The reward as verl loads it (docs/reward.md "verl"):

    reward.custom_reward_function.path=pkg://legival_core.rl.verl
    reward.custom_reward_function.name=compute_score
    LEGIVAL_REWARD_SPEC=examples/reward.yaml   # the reward spec (required)
    LEGIVAL_REWARD_URL=http://host:8790        # optional: score on `legival reward serve` (batching there)
    LEGIVAL_REWARD_TOKEN_FILE=...              # its bearer token, when it asks one

verl 0.9 calls `compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)` once per
sample (in a thread pool: this module is thread-safe), with the decoded response; it reads a dict's
`score` as the reward and every other key as a metric, and takes the keys from the first sample: so
every answer has the same keys (`KEYS`), a component that is off or unavailable is NaN. The question
the transfer student reads is `extra_info["question"]` when the data has it (verl's GSM8K preprocessing
keeps it there), else the data source's prompt cannot be known here and the sample is scored without a
question (its transfer then rests on the reasoning alone). verl pins a transformers older than
Legi-Val's: in a verl environment, forward to the reward server (LEGIVAL_REWARD_URL).
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

from legival_core.rl.items import Item, ItemError, completion_of, gold_of, step_of, text_of
from legival_core.run_config.reward import COMPONENTS

SPEC_ENV = "LEGIVAL_REWARD_SPEC"
URL_ENV = "LEGIVAL_REWARD_URL"
TOKEN_ENV = "LEGIVAL_REWARD_TOKEN_FILE"
KEYS = ("score", "correct", *(f"legival_{c}" for c in COMPONENTS), "legival_watch", "legival_refused")
"""Every answer's keys, whatever the spec weighs (verl takes them from the first sample)."""

_lock = threading.Lock()
_scorer: Any = None


def _spec() -> Any:
    from legival_core.run_config.reward import load_reward_spec

    path = os.environ.get(SPEC_ENV)
    if not path:
        raise RuntimeError(f"legival_core.rl.verl: set {SPEC_ENV} to the reward spec (e.g. examples/reward.yaml)")
    return load_reward_spec(path)


def _score(item: Item) -> dict[str, Any]:
    global _scorer
    url = os.environ.get(URL_ENV)
    if url:
        from legival_core.rl.client import post_score

        token_file = os.environ.get(TOKEN_ENV)
        token = Path(token_file).read_text(encoding="utf-8").strip() if token_file else None
        return post_score(url, [item], token)[0]
    with _lock:
        if _scorer is None:
            from legival_core.rl.score import Scorer

            _scorer = Scorer(_spec())
        return _scorer.score([item])[0].as_dict()


def compute_score(data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl's reward function (module docstring): the reward as `score`, the components beside it."""
    info = extra_info if isinstance(extra_info, dict) else {}
    try:
        question = text_of(info["question"], "extra_info.question") if info.get("question") is not None else ""
        item = Item(question, completion_of(solution_str, 1_000_000, "solution_str"),
                    gold_of(ground_truth, "ground_truth"), "verl", step_of(info.get("global_step"), "extra_info.global_step"),
                    str(data_source) if data_source is not None else None, None, info.get("index"))
    except ItemError:
        return _answer({"reward": None, "error": "refused"})
    return _answer(_score(item))


def _answer(result: dict[str, Any]) -> dict[str, float]:
    nan = math.nan
    parts = result.get("components") or {}
    out = {"score": float(result["reward"]) if result.get("reward") is not None else 0.0,
           "correct": 1.0 if result.get("correct") else 0.0}
    for c in COMPONENTS:
        value = (parts.get(c) or {}).get("value")
        out[f"legival_{c}"] = float(value) if value is not None else nan
    watch = (result.get("watch") or {}).get("value")
    out["legival_watch"] = float(watch) if watch is not None else nan
    out["legival_refused"] = 1.0 if result.get("reward") is None else 0.0
    return out
