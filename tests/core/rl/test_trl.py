"""The reward inside a real TRL `GRPOTrainer` (issue 47): SmolLM2-135M-Instruct as the policy on CPU,
four GSM8K prompts with their `answer` column (GSM8K's own: the worked solution, `#### N`), two
optimizer steps; TRL logs the reward under the spec's name, with the components the reward logged
beside it, and the rewards of one group differ (GRPO has something to learn from). Conversational
prompts (the chat template's path through TRL); the standard format's plain-text prompts reach the same
adapter and are read by `tests/core/rl/test_inputs.py` (one trainer run costs ~40 s on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.rl.trl import legibility_reward
from legival_core.run_config.reward import parse_reward_spec
from tests.conftest import REPO

pytestmark = pytest.mark.slow
trl = pytest.importorskip("trl", reason="TRL is not installed: make install (the `rl` extra)")

GSM8K = REPO / "tests" / "fixtures" / "datasets" / "gsm8k" / "test.jsonl"


def _rows(conversational: bool) -> list[dict[str, Any]]:
    rows = [json.loads(ln) for ln in GSM8K.read_text().splitlines()[:4]]
    out = []
    for i, r in enumerate(rows):
        q = r["question"] + " Reason step by step and end with 'The answer is N.'"
        out.append({"prompt": [{"role": "user", "content": q}] if conversational else q, "answer": r["answer"],
                    "uid": f"q{i}"})
    return out


def test_a_grpo_run_logs_the_legibility_reward(tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    spec = parse_reward_spec({"name": "legibility", "dataset": "gsm8k", "store": str(tmp_path / "log.duckdb"),
                              "components": {
                                  "correct": {"weight": 1.0}, "format": {"weight": 0.2},
                                  "length": {"weight": 0.3, "unit": "tokens", "target": 8},
                                  "transfer": {"weight": 0.5, "student": {"name": "scripted-demo",
                                                                          "backend": "scripted-demo",
                                                                          "model": "scripted-demo-v1"}}}})
    reward = legibility_reward(spec)
    seen: list[tuple[list[str], list[float | None]]] = []

    def watched(prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        out = reward(prompts, completions, **kwargs)
        seen.append((list(kwargs["uid"]), out))
        return out
    watched.__name__ = reward.__name__
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, gradient_checkpointing=False,
                      per_device_train_batch_size=8, num_generations=4, max_completion_length=24, max_steps=2,
                      logging_steps=1, report_to="none", save_strategy="no", seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(smollm2_safetensors_dir()), reward_funcs=[watched], args=args,
                          train_dataset=Dataset.from_list(_rows(conversational=True)))
    try:
        trainer.train()
    finally:
        reward.close()
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "rewards/legibility/mean" in h]
    assert len(logged) >= 2 and all(h["rewards/legibility/mean"] == h["rewards/legibility/mean"] for h in logged)
    assert any("legibility/length" in h for h in trainer.state.log_history)  # the components beside it
    groups: dict[str, list[float]] = {}
    for uids, rewards in seen:
        for u, r in zip(uids, rewards, strict=True):
            assert r is not None
            groups.setdefault(u, []).append(r)
    assert any(len(set(v)) > 1 for v in groups.values()), groups  # GRPO's advantages are not all zero
    from legival_core.store import Store
    from legival_core.store.reward_log import reward_rows

    with Store(tmp_path / "log.duckdb") as store:  # every scored completion logged, with its step
        logged_rows = reward_rows(store)
    assert logged_rows.height == sum(len(r) for _, r in seen) and set(logged_rows["step"].to_list()) == {0, 1}
