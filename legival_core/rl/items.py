"""What a training loop hands the scorer, checked once (docs/reward.md "Inputs").

An item is one completion of one prompt, with the gold answer of that prompt's problem. The frameworks
give them in their own shapes (TRL: strings or chat messages; verl: the decoded response; OpenRLHF: the
chat-templated prompt + response), all turned into `Item` here. What cannot be one (not text, too long,
no gold) is an `ItemError` naming the field: that item is answered with its reason, its batch scored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.types import content_hash

MAX_TEXT_CHARS = 200_000
"""A prompt, question or gold longer than this is refused (the spec bounds completions)."""

_CHATML = re.compile(r"<\|im_start\|>user\s*\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_LLAMA3 = re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\s*(.*?)(?:<\|eot_id\|>|$)", re.DOTALL)
_CHAT_END = re.compile(r"(<\|im_end\|>|<\|eot_id\|>|<\|endoftext\|>|</s>)\s*$")


class ItemError(ValueError):
    """An item that cannot be scored; `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Item:
    """One completion to score. `question` is the problem the student sees (the prompt's last user
    message when not given); `step` and `tag` are the client's (a training step, a checkpoint) and go
    to the log; `group` names the completions of one prompt (a GRPO group)."""

    question: str
    completion: str
    gold: str
    source: str = "native"
    step: int | None = None
    tag: str | None = None
    group: str | None = None
    ordinal: int | None = None
    """Its place in the client's call (TRL's list, a request's items): two equal completions of one
    call are two samples, logged twice; a retried call logs nothing new."""

    @property
    def key(self) -> str:
        """The item's identity in the log: a retried request logs nothing new."""
        return content_hash(self.source, str(self.step), str(self.tag), str(self.group), str(self.ordinal),
                            self.question, self.completion, self.gold)


def text_of(value: Any, field: str, limit: int = MAX_TEXT_CHARS) -> str:
    """A text field: a string, or chat messages (their last message's content), bounded."""
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        value = value[-1].get("content")
    if not isinstance(value, str):
        raise ItemError(field, f"expected text, got {type(value).__name__}")
    if len(value) > limit:
        raise ItemError(field, f"{len(value):,} characters, over the limit of {limit:,}")
    if "\x00" in value:
        raise ItemError(field, "holds a NUL character")
    return value


def question_of(prompt: Any, field: str = "prompt") -> str:
    """The problem a prompt asks: chat messages -> the last user message; a chat-templated string
    (ChatML, Llama 3) -> its last user turn; any other string -> itself."""
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users:
            raise ItemError(field, "chat messages without a user message")
        return text_of(users[-1].get("content"), field)
    text = text_of(prompt, field)
    for rx in (_CHATML, _LLAMA3):
        found = rx.findall(text)
        if found:
            return str(found[-1]).strip()
    return text


def gold_of(value: Any, field: str = "gold") -> str:
    """The gold answer: text, or a number (GSM8K's ints), never a boolean or a container."""
    if isinstance(value, bool) or value is None:
        raise ItemError(field, f"expected the gold answer (text or a number), got {_kind(value)}")
    if isinstance(value, int | float):
        if isinstance(value, float) and value != value:
            raise ItemError(field, "NaN is no gold answer")
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    gold = text_of(value, field, 10_000)
    if not gold.strip():
        raise ItemError(field, "empty")
    return gold.strip()


def completion_of(value: Any, limit: int, field: str = "completion") -> str:
    """A completion: a string or an assistant message list (TRL's conversational completions)."""
    return text_of(value, field, limit)


def response_of(query: str, prompt: str) -> str:
    """OpenRLHF's `query` is the templated prompt followed by the response (special tokens kept):
    the response is what follows the prompt, its end-of-turn token dropped."""
    body = query[len(prompt):] if query.startswith(prompt) else query
    return _CHAT_END.sub("", body)


def step_of(value: Any, field: str = "step") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ItemError(field, f"expected a training step (a whole number >= 0), got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return type(value).__name__


def items_from_lists(questions: Sequence[Any], completions: Sequence[Any], golds: Sequence[Any], *, source: str,
                     limit: int, step: int | None = None, tag: str | None = None,
                     groups: Sequence[Any] | None = None) -> list[Item | ItemError]:
    """Parallel lists (TRL's call) as items, each checked alone."""
    out: list[Item | ItemError] = []
    for i, (q, c, g) in enumerate(zip(questions, completions, golds, strict=True)):
        try:
            group = None if groups is None or groups[i] is None else str(groups[i])
            out.append(Item(question_of(q, f"prompts[{i}]"), completion_of(c, limit, f"completions[{i}]"),
                            gold_of(g, f"gold[{i}]"), source, step, tag, group, i))
        except ItemError as e:
            out.append(e)
    return out
