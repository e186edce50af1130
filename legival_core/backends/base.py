"""The one small interface every text-generation backend implements (students and teachers).

A backend takes a batch of fully rendered prompts and returns completions with the token accounting
the transfer benchmark needs: how many prompt tokens were actually prefilled versus served from a
prefix cache. Backends register a factory under their name; the factory imports heavy dependencies
(torch, vllm, httpx) only when called, so `legival_core` imports without them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

StopRule = Callable[[str], bool]
"""Called with the continuation generated so far; True means "stop now, the answer is complete".
Must be picklable (a module-level class instance), since requests travel to Ray workers."""

FinishReason = Literal["stop", "length", "rule", "overflow"]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt to continue. `group` names requests that share a prefix (e.g. the trace id);
    backends use it for prefix-cache locality and process a group's requests in the given order.
    `repetition_penalty` has HF/vLLM semantics: the logit of every token id already in the prompt or
    the generated text is divided by it when positive, multiplied when negative; 1.0 is off."""

    request_id: str
    prompt: str
    max_new_tokens: int
    group: str = ""
    stop_rule: StopRule | None = None
    repetition_penalty: float = 1.0


@dataclass(frozen=True, slots=True)
class Completion:
    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason
    prefill_computed: int
    prefill_cached: int


class TextBackend(Protocol):
    """What the planner needs from a model: its chat template, its tokenizer, and batched greedy
    generation."""

    @property
    def model_id(self) -> str: ...

    @property
    def context_length(self) -> int: ...

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]: ...

    def close(self) -> None: ...
