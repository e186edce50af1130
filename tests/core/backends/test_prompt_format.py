"""The plain-text prompt layout for base models, and the chat template for the others."""

from __future__ import annotations

from typing import Any

import pytest

from legival_core.backends.base import ChatMessage
from legival_core.backends.prompt_format import PLAIN_TURN_END, render_chat_with, render_plain, turn_end

MSGS = [ChatMessage("system", "Solve it. "), ChatMessage("user", " 2 + 3? "), ChatMessage("assistant", "2 + 3 = 5.")]


class _NoTemplate:
    chat_template = None
    bos_token = "<bos>"


class _Template:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, msgs: list[dict[str, Any]], **kw: Any) -> str:
        return "|".join(m["content"] for m in msgs) + ("<open>" if kw.get("continue_final_message") else "<gen>")


def test_plain_layout_continues_the_open_assistant_message() -> None:
    assert render_plain(MSGS, True, "<bos>") == "<bos>Solve it.\n\nQuestion: 2 + 3?\nAnswer: 2 + 3 = 5."
    assert render_chat_with(_NoTemplate(), MSGS, True) == render_plain(MSGS, True, "<bos>")


def test_plain_layout_asks_for_an_answer() -> None:
    assert render_plain(MSGS[:2], False) == "Solve it.\n\nQuestion: 2 + 3?\nAnswer:"
    # a closed assistant turn is a line of its own; nothing is appended after it
    assert render_plain(MSGS, False) == "Solve it.\n\nQuestion: 2 + 3?\nAnswer: 2 + 3 = 5.\n"


def test_a_chat_template_wins_and_has_no_plain_turn_end() -> None:
    assert render_chat_with(_Template(), MSGS, True) == "Solve it. | 2 + 3? |2 + 3 = 5.<open>"
    assert turn_end(_Template()) is None
    assert turn_end(_NoTemplate()) == PLAIN_TURN_END == "\nQuestion:"


def test_continuing_needs_an_assistant_message() -> None:
    with pytest.raises(ValueError, match="final assistant message"):
        render_chat_with(_NoTemplate(), MSGS[:2], True)
