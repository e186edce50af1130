"""The reward server's requests and answers, as pure functions (docs/reward.md "HTTP"): the server
(`tasks/reward_serve.py`) only moves bytes.

- `POST /score` (native): `{"items": [{"prompt", "completion", "gold", "question"?, "step"?, "tag"?,
  "group"?}, ...]}` -> `{"results": [{"reward", "correct", "components": {name: {value, raw, reason}},
  "watch", "error", "reason"}, ...]}`, one result per item in order; an item that cannot be scored
  has its `error` and a null reward, the others are scored.
- `POST /get_reward` (OpenRLHF's remote reward model, its client `openrlhf/utils/agent.py`
  `SingleTurnAgentExecutor._fetch_rewards_via_http` at openrlhf 0.11.2): `{"query": [...], "prompts":
  [...], "labels": [...]}` -> `{"rewards": [...], "scores": [...], "extra_logs": {name: [...]}}`. A
  query is the chat-templated prompt followed by the response; a label is the gold (text or a
  number), or an object `{"gold", "question"}`. OpenRLHF reads numbers only: an item that cannot be
  scored gets reward 0.0 and `extra_logs.legival_refused` 1.0 (and its reason in the server's log).

A request that is not one (not a JSON object, lists of different lengths, too many items) is a
`RequestRefused` (HTTP 400 naming what is wrong); never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.rl.items import (
    Item,
    ItemError,
    completion_of,
    gold_of,
    question_of,
    response_of,
    step_of,
    text_of,
)
from legival_core.rl.score import Scored

MAX_ITEMS = 1024
"""Items one request may carry."""


class RequestRefused(ValueError):
    """A request the server cannot read at all (400)."""


def _items_field(body: Any) -> list[Any]:
    if not isinstance(body, dict):
        raise RequestRefused(f"expected a JSON object, got {type(body).__name__}")
    items = body.get("items")
    if not isinstance(items, list):
        raise RequestRefused("field 'items': expected a list of {prompt, completion, gold}")
    if len(items) > MAX_ITEMS:
        raise RequestRefused(f"field 'items': {len(items):,} items, over the limit of {MAX_ITEMS:,} per request")
    return items


def parse_native(body: Any, limit: int) -> list[Item | ItemError]:
    """The items of a `POST /score` body, each checked alone (`limit`: the spec's completion size)."""
    out: list[Item | ItemError] = []
    for i, raw in enumerate(_items_field(body)):
        where = f"items[{i}]"
        try:
            if not isinstance(raw, dict):
                raise ItemError(where, f"expected an object, got {type(raw).__name__}")
            if "prompt" not in raw and "question" not in raw:
                raise ItemError(f"{where}.prompt", "missing")
            for name in ("completion", "gold"):
                if name not in raw:
                    raise ItemError(f"{where}.{name}", "missing")
            question = (text_of(raw["question"], f"{where}.question") if raw.get("question") is not None
                        else question_of(raw["prompt"], f"{where}.prompt"))
            tag, group = raw.get("tag"), raw.get("group")
            out.append(Item(question, completion_of(raw["completion"], limit, f"{where}.completion"),
                            gold_of(raw["gold"], f"{where}.gold"), _source(raw.get("source")),
                            step_of(raw.get("step"), f"{where}.step"),
                            None if tag is None else text_of(tag, f"{where}.tag", 200),
                            None if group is None else text_of(str(group), f"{where}.group", 200), i))
        except ItemError as e:
            out.append(e)
    return out


def _source(value: Any) -> str:
    return value if isinstance(value, str) and value in ("native", "trl", "verl", "openrlhf") else "native"


def parse_openrlhf(body: Any, limit: int, step: int | None = None) -> list[Item | ItemError]:
    """The items of OpenRLHF's `POST /get_reward` body (module docstring)."""
    if not isinstance(body, dict):
        raise RequestRefused(f"expected a JSON object with query, prompts and labels, got {type(body).__name__}")
    lists = {}
    for name in ("query", "prompts", "labels"):
        value = body.get(name)
        if not isinstance(value, list):
            raise RequestRefused(f"field {name!r}: expected a list, got {type(value).__name__ if value is not None else 'nothing'}")
        lists[name] = value
    n = len(lists["query"])
    if len(lists["prompts"]) != n or len(lists["labels"]) != n:
        raise RequestRefused(f"query, prompts and labels must be as long as each other (got {n}, "
                             f"{len(lists['prompts'])}, {len(lists['labels'])})")
    if n > MAX_ITEMS:
        raise RequestRefused(f"{n:,} items, over the limit of {MAX_ITEMS:,} per request")
    out: list[Item | ItemError] = []
    for i in range(n):
        try:
            query = text_of(lists["query"][i], f"query[{i}]", 2 * limit)
            prompt = text_of(lists["prompts"][i], f"prompts[{i}]")
            label = lists["labels"][i]
            question = None
            if isinstance(label, dict):
                question = label.get("question")
                label = label.get("gold")
            gold = gold_of(label, f"labels[{i}]")
            q = text_of(question, f"labels[{i}].question") if question is not None else question_of(prompt, f"prompts[{i}]")
            out.append(Item(q, completion_of(response_of(query, prompt), limit, f"query[{i}]"), gold, "openrlhf",
                            step, group=None, ordinal=i))
        except ItemError as e:
            out.append(e)
    return out


def native_answer(results: Sequence[Scored]) -> dict[str, Any]:
    return {"results": [r.as_dict() for r in results]}


def openrlhf_answer(results: Sequence[Scored]) -> dict[str, Any]:
    """OpenRLHF's shape: numbers only (module docstring); every component, the watch and the
    correctness as `extra_logs` lists (it logs their means)."""
    rewards = [float(r.reward) if r.reward is not None else 0.0 for r in results]
    names = sorted({n for r in results for n in r.components})
    logs: dict[str, list[float]] = {f"legival_{n}": [_num(r.components[n].value) if n in r.components else 0.0
                                                     for r in results] for n in names}
    logs["legival_correct"] = [1.0 if r.correct else 0.0 for r in results]
    logs["legival_watch"] = [_num(r.watch.value) if r.watch is not None else 0.0 for r in results]
    logs["legival_refused"] = [1.0 if r.reward is None else 0.0 for r in results]
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs}


def _num(value: float | None) -> float:
    return float(value) if value is not None else 0.0
