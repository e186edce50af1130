"""How a list of chat messages becomes one prompt string: the model's chat template when it has one,
else a plain-text layout for base (pretrained) models such as Gemma 3 270M.

The plain layout (documented in docs/transfer.md) is the one a base model continues naturally:

    <bos>{system}

    Question: {question}
    Answer: {assistant prefix}

Every backend and the planner's prompt counter render through `render_chat_with`, so a student's
prompts are the same text wherever they are built. The tokenizer's BOS token is written as text
because backends tokenize prompts with `add_special_tokens=False` (chat templates write their own
special tokens the same way); a base model without its BOS token produces noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.backends.base import ChatMessage

PLAIN_LABELS = {"user": "Question: ", "assistant": "Answer: "}
"""The label of each role in the plain layout (system text stands alone)."""


PLAIN_TURN_END = "\n" + PLAIN_LABELS["user"].rstrip()
"""Where a base model's answer ends: it starts the next `Question:` of its own. Backends cut the
continuation there and finish the row as a stop (the plain layout's end of turn, as EOS is a chat
model's), so a made-up next question never reaches the grader."""


def turn_end(tokenizer: Any) -> str | None:
    """The text that ends a turn in the prompt layout `tokenizer` gets (None: the model's EOS token)."""
    return None if has_chat_template(tokenizer) else PLAIN_TURN_END


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_chat_with(tokenizer: Any, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
    """The model's own chat template (or the plain layout when it has none); `continue_final_message`
    leaves the last (assistant) message open, so the model continues it instead of starting a new turn."""
    msgs = [{"role": m.role, "content": m.content} for m in messages]
    if continue_final_message and (not msgs or msgs[-1]["role"] != "assistant"):
        raise ValueError("continue_final_message needs a final assistant message to continue")
    if not has_chat_template(tokenizer):
        return render_plain(messages, continue_final_message, str(getattr(tokenizer, "bos_token", None) or ""))
    if continue_final_message:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, continue_final_message=True)
    else:
        text = tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=not msgs or msgs[-1]["role"] != "assistant"
        )
    return str(text)


def render_plain(messages: Sequence[ChatMessage], continue_final_message: bool, bos: str = "") -> str:
    """The plain-text layout: system text, then `Question: ...` / `Answer: ...` lines. An open final
    assistant message ends the prompt as given; otherwise the prompt ends with `Answer:` for the
    model to answer."""
    parts: list[str] = []
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        if m.role == "system":
            parts.append(m.content.strip() + "\n\n")
        elif m.role == "assistant" and last and continue_final_message:
            parts.append(PLAIN_LABELS["assistant"] + m.content)
        else:
            parts.append(PLAIN_LABELS.get(m.role, f"{m.role.capitalize()}: ") + m.content.strip() + "\n")
    if not continue_final_message and (not messages or messages[-1].role != "assistant"):
        parts.append(PLAIN_LABELS["assistant"].rstrip())
    return bos + "".join(parts)
