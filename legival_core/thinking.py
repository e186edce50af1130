"""Split a raw model output into its thinking section and the answer after it.

Formats (issue: ingestion; later: generation): `<think>...</think>` (DeepSeek-R1, QwQ, Qwen3, also
when the chat template already opened `<think>` so only `</think>` appears), gpt-oss harmony channels
(`analysis` vs `final`, with or without the special tokens), `[THINK]...[/THINK]` (Magistral).
A thinking section that never closes means the token budget ran out mid-reasoning: `truncated`.
An output with no thinking markers is a model without a thinking section: the whole text is the
trace, and its answer is read from the end of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ThinkingFormat = Literal["think_tags", "harmony", "think_brackets", "none"]


@dataclass(frozen=True, slots=True)
class SplitOutput:
    reasoning: str
    answer_text: str
    truncated: bool
    format: ThinkingFormat


_HARMONY_TOKENS = re.compile(
    r"<\|channel\|>(?P<channel>\w+)(?:\s+[^<]*)?<\|message\|>(?P<body>.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|$)",
    re.DOTALL,
)
# Harmony decoded with special tokens skipped: "analysis<text>assistantfinal<text>".
_HARMONY_PLAIN = re.compile(r"^\s*analysis(?P<analysis>.*?)assistantfinal(?P<final>.*)$", re.DOTALL)


def split_thinking(raw: str) -> SplitOutput:
    if "</think>" in raw or "<think>" in raw:
        return _split_pair(raw, "<think>", "</think>", "think_tags")
    if "[/THINK]" in raw or "[THINK]" in raw:
        return _split_pair(raw, "[THINK]", "[/THINK]", "think_brackets")
    if "<|channel|>" in raw:
        return _split_harmony_tokens(raw)
    m = _HARMONY_PLAIN.match(raw)
    if m:
        return SplitOutput(m["analysis"].strip(), m["final"].strip(), False, "harmony")
    if raw.lstrip().startswith("analysis") and "assistantfinal" not in raw:
        return SplitOutput(raw.lstrip()[len("analysis") :].strip(), "", True, "harmony")
    return SplitOutput(raw.strip(), "", False, "none")


def _split_pair(raw: str, open_tag: str, close_tag: str, fmt: ThinkingFormat) -> SplitOutput:
    start = raw.find(open_tag)
    body_start = start + len(open_tag) if start >= 0 else 0
    end = raw.find(close_tag, body_start)
    if end < 0:
        return SplitOutput(raw[body_start:].strip(), "", True, fmt)
    return SplitOutput(raw[body_start:end].strip(), raw[end + len(close_tag) :].strip(), False, fmt)


def _split_harmony_tokens(raw: str) -> SplitOutput:
    analysis: list[str] = []
    final: list[str] = []
    for m in _HARMONY_TOKENS.finditer(raw):
        (final if m["channel"] == "final" else analysis if m["channel"] == "analysis" else []).append(
            m["body"]
        )
    truncated = not final
    return SplitOutput("\n".join(a.strip() for a in analysis), "\n".join(f.strip() for f in final), truncated, "harmony")
