"""Run inside .venv-rl: OpenRLHF 0.11.2's own remote-reward client (`openrlhf.utils.agent.
SingleTurnAgentExecutor`, its `--reward.remote_url` path: one aiohttp POST per rollout to the URL, the
chat-templated prompt + response as `query`) against the reward server at argv[1], with an engine that
answers fixed texts (no GPU here). Prints one JSON line: what OpenRLHF made of each answer."""

import asyncio
import json
import sys
from types import SimpleNamespace

from openrlhf.utils.agent import SingleTurnAgentExecutor
from transformers import AutoTokenizer

url, model_dir = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(model_dir)
ANSWERS = [" 9 + 9 = 18. He has 18 apples. The answer is \\boxed{18}.", " It is 20. The answer is \\boxed{20}."]


class Engine:
    def __init__(self, text: str) -> None:
        self.text = text

    async def generate(self, ids, params, multi_modal_data=None):
        out = tok.encode(self.text) + [tok.eos_token_id]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=out, text=tok.decode(out), finish_reason="stop",
                                                        logprobs=None)])


executor = SingleTurnAgentExecutor([url])
prompt = tok.apply_chat_template([{"role": "user", "content": "Tom has 9 apples and buys 9 more. How many apples does "
                                   "he have?"}], tokenize=False, add_generation_prompt=True)
params = SimpleNamespace(max_tokens=64, logprobs=None)


async def go():
    return await asyncio.gather(*[executor.execute(prompt, "18", params, 512, tok, Engine(a)) for a in ANSWERS * 2])

outs = asyncio.run(go())
print(json.dumps([{"reward": [float(x) for x in o["reward"]], "scores": [float(x) for x in o["scores"]],
                   "extra_logs": {k: [float(x) for x in v] for k, v in o["extra_logs"].items()}} for o in outs]))
