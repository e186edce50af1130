"""Prompt tokens of planned rollouts, counted with the student's tokenizer and no model.

A rollout's prompt is the chat rendering of [system, question, assistant: prefix(k)] with the final
message left open, tokenized without special tokens: what every backend reports as `prompt_tokens`.
Rendering and tokenizing each of a trace's prompts would cost one full tokenization per depth; the
prompts of one trace differ only in how much of the same reasoning they hold, so the deepest prompt
is rendered and tokenized once (with character offsets) and each shallower prompt is a cut of it:
its tokens are those that start before the cut (the cut sits at the end of the prefix, or of the
stripped prefix where the template strips the open message); an empty prefix (k = 0) may render
differently and is rendered on its own. Tests compare this
with tokenizing every prompt in full.

Prefix sharing: a prefix cache that keeps a trace's prompts (vLLM's automatic prefix caching, the
embedded backend's per-trace KV reuse) computes the deepest prompt once and, for each other prompt,
at least its last token (the logits of the next token are needed): `computed`.

Without the tokenizer (a hub model whose files are not here) counts are an estimate from tiktoken's
cl100k_base plus a fixed template allowance, flagged as such.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from legival_core.transfer.rollout_plan import PlannedRollout, student_messages

TEMPLATE_ALLOWANCE = 12
"""Tokens of chat markup added per prompt by the estimate (system/user/assistant headers)."""


@dataclass(frozen=True, slots=True)
class PromptTokens:
    requested: int
    computed: int

    def __add__(self, other: PromptTokens) -> PromptTokens:
        return PromptTokens(self.requested + other.requested, self.computed + other.computed)


ZERO = PromptTokens(0, 0)


class PromptCounter:
    """Counts with `tokenizer` (a transformers tokenizer) or, when None, estimates with cl100k_base."""

    def __init__(self, tokenizer: Any | None, source: str) -> None:
        self.tokenizer = tokenizer
        self.exact = tokenizer is not None
        self.source = source if self.exact else f"estimate with tiktoken cl100k_base ({source})"
        self._blank: dict[tuple[str, str, str], int] = {}
        """(system, question, blank prefix) -> its prompt's tokens: the prompt at k = 0 is the same
        for every trace of a problem, and the teachers of a spec answer the same problems."""

    def text_tokens(self, text: str) -> int:
        """Tokens of a plain text (the forcing text a forced rollout's prompt grows by)."""
        if self.tokenizer is None:
            from legival_core.token_count import encoding

            return len(encoding().encode_ordinary(text))
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count(self, system: str, question: str, plans: Sequence[PlannedRollout]) -> PromptTokens:
        """The prompt tokens of one trace's planned rollouts (any subset of its depths)."""
        if not plans:
            return ZERO
        sizes = self.sizes(system, question, plans)
        return PromptTokens(sum(sizes), max(sizes) + len(sizes) - 1)

    def sizes(self, system: str, question: str, plans: Sequence[PlannedRollout]) -> list[int]:
        if self.tokenizer is None:
            return self._estimate(system, question, plans)
        from legival_core.backends.prompt_format import render_chat_with

        tok = self.tokenizer

        def render(prefix: str) -> str:
            return render_chat_with(tok, student_messages(system, question, prefix), True)

        deep = max(plans, key=lambda p: len(p.prefix))
        full = render(deep.prefix)
        enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
        starts = [a for a, _ in enc["offset_mapping"]]
        # Templates keep the open message as given, or strip it (transformers versions differ).
        kept = full.endswith(deep.prefix)
        anchor = len(full) - len(deep.prefix) if kept else full.rindex(deep.prefix.strip())
        out = []
        for p in plans:
            if not p.prefix.strip():
                key = (system, question, p.prefix)
                if key not in self._blank:
                    self._blank[key] = len(tok(render(p.prefix), add_special_tokens=False)["input_ids"])
                out.append(self._blank[key])
            else:
                cut = anchor + len(p.prefix if kept else p.prefix.strip())
                out.append(bisect.bisect_left(starts, cut))
        return out

    def _estimate(self, system: str, question: str, plans: Sequence[PlannedRollout]) -> list[int]:
        """cl100k tokens of the system prompt and question, a template allowance, and the deepest
        prefix's tokens per character applied to each prefix's length."""
        from legival_core.token_count import encoding

        enc = encoding()
        head = len(enc.encode_ordinary(system)) + len(enc.encode_ordinary(question)) + TEMPLATE_ALLOWANCE
        deep = max(plans, key=lambda p: len(p.prefix)).prefix
        per_char = len(enc.encode_ordinary(deep)) / len(deep) if deep else 0.0
        return [head + round(per_char * len(p.prefix.rstrip())) for p in plans]
