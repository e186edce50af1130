"""Validation of a judge's reply against the paper's schema (SPEC section 3, appendix A.3)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from legival_core import untrusted_json


class ReplyInvalid(ValueError):
    """The reply is not JSON, or breaks the schema; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A validated reply, with the step numbers already restricted to the range shown to the judge."""

    backtracking_detected: bool
    final_answer: str
    steps: tuple[int, ...]
    dropped: int
    confidence: float
    overall_reasoning: str


_REQUIRED = ("backtracking_detected", "final_answer", "backtracking_steps", "confidence", "overall_reasoning")


def extract_json_text(text: str) -> str:
    """Strip a markdown fence and surrounding prose, as the paper's `_extract_json_text` does."""
    content = text.strip()
    if "```json" in content:
        content = content.split("```json", 1)[1].split("```", 1)[0].strip()
    elif content.startswith("```"):
        parts = content.split("```", 2)
        if len(parts) >= 2:
            content = parts[1].strip()
    start, end = content.find("{"), content.rfind("}")
    if start != -1 and end > start:
        return content[start : end + 1]
    return content


def parse_judgement(text: str | None, first: int, last: int) -> Judgement:
    """Validate a reply against the paper's schema; keep step numbers in first..last, count the rest.

    Strict on types (an int must be an int, a bool a bool), on confidence in [0, 1], and on the
    paper's constraint that `backtracking_steps` is empty iff `backtracking_detected` is false:
    a reply breaking any of these is re-asked once, never guessed at.
    """
    if text is None or not text.strip():
        raise ReplyInvalid("empty reply")
    try:
        obj = untrusted_json.loads(extract_json_text(text))
    except json.JSONDecodeError as e:  # JsonRefused too: too deep, a huge number
        raise ReplyInvalid(f"not valid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(obj, dict):
        raise ReplyInvalid(f"top level is {type(obj).__name__}, expected an object")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise ReplyInvalid(f"missing keys: {', '.join(missing)}")
    detected, final, items, conf, overall = (obj[k] for k in _REQUIRED)
    if not isinstance(detected, bool):
        raise ReplyInvalid("backtracking_detected must be a boolean")
    if not isinstance(final, str):
        raise ReplyInvalid("final_answer must be a string")
    if not isinstance(overall, str):
        raise ReplyInvalid("overall_reasoning must be a string")
    if isinstance(conf, bool) or not isinstance(conf, int | float) or not math.isfinite(conf):
        raise ReplyInvalid("confidence must be a number")
    if not 0.0 <= float(conf) <= 1.0:
        raise ReplyInvalid(f"confidence {conf} is outside [0, 1]")
    if not isinstance(items, list):
        raise ReplyInvalid("backtracking_steps must be an array")
    numbers: list[int] = []
    for i, it in enumerate(items):
        if not isinstance(it, dict) or "step_number" not in it or "reason" not in it:
            raise ReplyInvalid(f"backtracking_steps[{i}] must be an object with step_number and reason")
        n = it["step_number"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise ReplyInvalid(f"backtracking_steps[{i}].step_number must be an integer")
        if not isinstance(it["reason"], str):
            raise ReplyInvalid(f"backtracking_steps[{i}].reason must be a string")
        numbers.append(n)
    if not detected and numbers:
        raise ReplyInvalid("backtracking_steps must be [] when backtracking_detected is false")
    if detected and not numbers:
        raise ReplyInvalid("backtracking_detected is true but backtracking_steps is empty")
    distinct = set(numbers)
    kept = tuple(sorted(n for n in distinct if first <= n <= last))
    return Judgement(detected, final, kept, len(distinct) - len(kept), float(conf), overall)

