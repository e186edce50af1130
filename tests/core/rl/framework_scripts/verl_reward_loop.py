"""Run inside .venv-rl: verl's own reward loop (verl 0.9.1 `RewardLoopWorker`, what its trainer uses
through `reward.custom_reward_function.path/name`) scores a DataProto with `legival_core.rl.verl`.
Prints one JSON line: the scores and extra infos verl assembled."""

import asyncio
import json
import os
import sys

import numpy as np
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

model_dir = sys.argv[1]
tok = AutoTokenizer.from_pretrained(model_dir)
questions = ["Tom has 9 apples and buys 9 more. How many apples does he have?"] * 3
responses = ["9 + 9 = 18. So he has 18 apples. The answer is \\boxed{18}.", "He has 20. The answer is \\boxed{20}.",
             "9 and 9 make 18 apples in all. The answer is 18."]
golds = ["18", "18", "18"]
P, R = 32, 48
pad = tok.pad_token_id or 0
pi, pm, ri, rm = [], [], [], []
for q, r in zip(questions, responses, strict=True):
    p_ids, r_ids = tok.encode(q)[:P], tok.encode(r)[:R]
    pi.append([pad] * (P - len(p_ids)) + p_ids)
    pm.append([0] * (P - len(p_ids)) + [1] * len(p_ids))
    ri.append(r_ids + [pad] * (R - len(r_ids)))
    rm.append([1] * len(r_ids) + [0] * (R - len(r_ids)))
prompts, resp = torch.tensor(pi), torch.tensor(ri)
data = DataProto.from_dict(
    tensors={"prompts": prompts, "responses": resp, "input_ids": torch.cat([prompts, resp], 1),
             "attention_mask": torch.cat([torch.tensor(pm), torch.tensor(rm)], 1)},
    non_tensors={"data_source": np.array(["openai/gsm8k"] * 3, dtype=object),
                 "reward_model": np.array([{"ground_truth": g, "style": "rule"} for g in golds], dtype=object),
                 "extra_info": np.array([{"index": i, "question": q} for i, q in enumerate(questions)], dtype=object)})
cfg = OmegaConf.create({
    "actor_rollout_ref": {"model": {"path": model_dir, "tokenizer_path": None}},
    "reward": {"num_workers": 1,
               "custom_reward_function": {"path": "pkg://legival_core.rl.verl", "name": "compute_score"},
               "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "x"}},
               "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})


async def go():
    return await RewardLoopWorker(cfg).compute_score_batch(data)

out = asyncio.run(go())
tensor = RewardManagerBase.assemble_rm_scores(data, [o["reward_score"] for o in out])
print(json.dumps({"scores": [o["reward_score"] for o in out], "extra": [o["reward_extra_info"] for o in out],
                  "token_level": tensor.sum(1).tolist(), "spec": os.environ["LEGIVAL_REWARD_SPEC"]}))
