"""Reasoning extraction for generated teacher outputs (issue 7, part 1).

`legival_core.thinking.split_thinking` knows the markers (`<think>`, harmony channels, `[THINK]`);
generation adds what only the generator knows: whether the chat template already opened the thinking
section in the prompt (Qwen3, DeepSeek-R1 templates end the prompt with `<think>`), a separate
`reasoning_content` field returned by OpenAI-compatible servers with a reasoning parser, and whether
the backend stopped on the token budget. A generation cut by the budget is `truncated` whatever its
format: inside the thinking section the thinking never closed, after it the answer is incomplete,
and for a model without a thinking section the whole trace is cut. Truncated traces are graded status
'truncated' by the ingest path, never as if complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from legival_core.thinking import SplitOutput, ThinkingFormat, split_thinking

OPENERS = ("<think>", "[THINK]")


@dataclass(frozen=True, slots=True)
class Extracted:
    reasoning: str
    answer_text: str
    truncated: bool
    format: ThinkingFormat | str
    cut_in_thinking: bool


def opened_in_prompt(prompt: str) -> str | None:
    """The thinking opener the rendered prompt ends with, if any (the template opened it)."""
    tail = prompt.rstrip()
    for opener in OPENERS:
        if tail.endswith(opener):
            return opener
    return None


def extract_reasoning(
    text: str,
    finish_reason: str,
    prompt: str = "",
    reasoning_content: str | None = None,
) -> Extracted:
    """Split one generation into reasoning and answer; `finish_reason == 'length'` marks truncation."""
    cut = finish_reason == "length"
    if reasoning_content is not None:
        # The server already separated the thinking; an empty answer after a budget stop means the
        # cut happened inside the thinking.
        return Extracted(reasoning_content.strip(), text.strip(), cut, "reasoning_content", cut and not text.strip())
    opener = opened_in_prompt(prompt)
    raw = text if opener is None or opener in text else opener + text
    split: SplitOutput = split_thinking(raw)
    in_thinking = split.truncated and split.format != "none"
    return Extracted(split.reasoning, split.answer_text, split.truncated or cut, split.format, in_thinking)
