"""Windowing of over-long traces: consecutive, non-overlapping windows that each fit the prompt budget
(rules in `base.py`'s docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from legival_core.judges.prompt import user_prompt
from legival_core.judges.records import JudgeRequest


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How a trace whose prompt is over budget is handled. Token counts are estimated as chars / 4."""

    max_prompt_tokens: int = 200_000
    chars_per_token: float = 4.0
    split: bool = True

    def tokens(self, chars: int) -> int:
        return math.ceil(chars / self.chars_per_token)


@dataclass(frozen=True, slots=True)
class Window:
    first: int
    steps: tuple[str, ...]

    @property
    def last(self) -> int:
        return self.first + len(self.steps) - 1


@dataclass(frozen=True, slots=True)
class WindowPlan:
    windows: tuple[Window, ...]
    overflow_reason: str = ""


def plan_windows(
    request: JudgeRequest, system: str, policy: WindowPolicy, include_question: bool
) -> WindowPlan:
    """One window when the whole prompt fits; otherwise greedy consecutive windows, or overflow."""
    question = request.question if include_question else None
    m = request.m
    whole = len(system) + len(user_prompt(request.steps, first=1, m=m, question=question))
    if policy.tokens(whole) <= policy.max_prompt_tokens:
        return WindowPlan((Window(1, request.steps),))
    est = policy.tokens(whole)
    if not policy.split:
        return WindowPlan(
            (), f"prompt ~{est} tokens > budget {policy.max_prompt_tokens} (splitting disabled)"
        )
    # Fixed cost of a window: system + wrapper + excerpt note with the widest step numbers.
    overhead = len(system) + len(user_prompt(("",), first=m, m=m + 1, question=question))
    windows: list[Window] = []
    cur: list[str] = []
    cur_chars = overhead
    start = 1
    for k, s in enumerate(request.steps, start=1):
        line = len(f"[{k}] ") + len(" ".join(s.split())) + 1
        if policy.tokens(overhead + line) > policy.max_prompt_tokens:
            return WindowPlan((), f"step {k} alone is ~{policy.tokens(overhead + line)} tokens > budget")
        if cur and policy.tokens(cur_chars + line) > policy.max_prompt_tokens:
            windows.append(Window(start, tuple(cur)))
            cur, cur_chars, start = [], overhead, k
        cur.append(s)
        cur_chars += line
    if cur:
        windows.append(Window(start, tuple(cur)))
    return WindowPlan(tuple(windows))

