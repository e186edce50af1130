"""The reward server as a client calls it (`POST /score`, docs/reward.md "HTTP"): the TRL and verl
adapters forward here when given a URL, so one server batches every trainer's completions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.llm.transport import post_json
from legival_core.rl.items import Item

TIMEOUT_S = 900.0
"""A batch of rollouts on a busy engine may take minutes."""


def post_score(url: str, items: Sequence[Item], token: str | None = None) -> list[dict[str, Any]]:
    """Score `items` on the server at `url` (its root); one result per item, in order."""
    if not items:
        return []
    body = {"items": [{"question": it.question, "completion": it.completion, "gold": it.gold, "step": it.step,
                       "tag": it.tag, "group": it.group, "source": it.source} for it in items]}
    got = post_json(url.rstrip("/") + "/score", body, token=token, timeout_s=TIMEOUT_S)
    results = got.get("results") if isinstance(got, dict) else None
    if not isinstance(results, list) or len(results) != len(items):
        raise ValueError(f"{url}/score answered {len(results) if isinstance(results, list) else 'no'} results "
                         f"for {len(items)} items")
    return results
