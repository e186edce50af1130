"""The generation cache: one row per (model, prompt, decoding, problem), so a rerun generates nothing.

The `generations` table is defined with the others in `legival_core/store/schema.py`; it is read with
`store.planner.cached_generations` and written with `Store.insert_rows` (the generate stage).
"""

from __future__ import annotations

import json
from typing import Any

from legival_core.types import canonical_json, content_hash

COLUMNS = ("cache_key", "model", "teacher", "dataset", "problem_id", "prompt_hash", "decoding", "text",
           "reasoning_content", "finish_reason", "prompt_tokens", "completion_tokens")


def cache_key(model: str, prompt: str, decoding: dict[str, Any], dataset: str, problem_id: str) -> str:
    """Hash of what changes the output: model, exact prompt, applied decoding, problem. The teacher
    name is not in it (the same model under two names reuses generations)."""
    return content_hash(model, prompt, canonical_json(decoding), dataset, problem_id)


def cache_row(key: str, model: str, teacher: str, dataset: str, problem_id: str, prompt: str,
              decoding: dict[str, Any], text: str, reasoning_content: str | None, finish_reason: str,
              prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """One `generations` row (the columns of `COLUMNS`)."""
    return {"cache_key": key, "model": model, "teacher": teacher, "dataset": dataset, "problem_id": problem_id,
            "prompt_hash": content_hash(prompt), "decoding": json.dumps(decoding, sort_keys=True), "text": text,
            "reasoning_content": reasoning_content, "finish_reason": finish_reason,
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
