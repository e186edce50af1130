"""The one small interface every text-generation backend implements (students and teachers).

A backend takes a batch of fully rendered prompts and returns completions with the token accounting
the transfer benchmark needs: how many prompt tokens were actually prefilled versus served from a
prefix cache. Backends register a factory under their name; the factory imports heavy dependencies
(torch, vllm, transformers) only when called, so `legival_core` imports without them (httpx, a
dependency, comes with `legival_core.llm`, the HTTP client of the `openai` backend).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from legival_core.registry import entry

StopRule = Callable[[str], bool]
"""Called with the continuation generated so far; True means "stop now, the answer is complete".
Must be picklable (a module-level class instance), since requests travel to Ray workers."""

FinishReason = Literal["stop", "length", "rule", "overflow"]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Sampling:
    """Random decoding with HF/vLLM semantics, applied in this order after the repetition penalty:
    divide logits by `temperature`, keep the `top_k` best (0 = all), keep the smallest set whose
    probability reaches `top_p`, draw. `seed` seeds one generator per request, so a request's draw
    does not depend on its batch mates or on the order requests run in (the embedded backend; vLLM
    and servers honour a per-request seed the same way). Students never sample (SPEC: greedy);
    teachers use their model card's recommendation (configs/models)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"sampling temperature must be > 0 (greedy is `sampling=None`), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt to continue. `group` names requests that share a prefix (e.g. the trace id);
    backends use it for prefix-cache locality and process a group's requests in the given order.
    `repetition_penalty` has HF/vLLM semantics: the logit of every token id already in the prompt or
    the generated text is divided by it when positive, multiplied when negative; 1.0 is off.
    `sampling` None means greedy (every student rollout)."""

    request_id: str
    prompt: str
    max_new_tokens: int
    group: str = ""
    stop_rule: StopRule | None = None
    repetition_penalty: float = 1.0
    sampling: Sampling | None = None


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
    """What the planner needs from a model: its chat template, its tokenizer, and batched generation
    (greedy, or seeded sampling per request)."""

    @property
    def model_id(self) -> str: ...

    @property
    def context_length(self) -> int: ...

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """Registry metadata of a backend: the numeric precisions it runs (a student's `dtype` is checked
    against them when the spec loads), whether it can serve as a student (continue a prefix), and
    whether a teacher on it generates through its server's chat endpoint (`chat_teacher`: the
    template applied server-side, `generation.engines.ChatEndpointEngine`) rather than through the
    backend itself."""

    dtypes: tuple[str, ...] = ()
    student: bool = True
    chat_teacher: bool = False
    max_batch: int | None = None
    """Rows it decodes together by default (its `max_batch` option overrides); None: a call's rows all
    at once (a server's continuous batching). The plan's cost model counts decode steps with it."""


BackendFactory = Callable[..., TextBackend]
"""factory(model: str | None, dtype: str | None, **options) -> TextBackend; heavy imports inside."""


def make_backend(name: str, model: str | None, dtype: str | None, options: Mapping[str, Any] | None = None) -> TextBackend:
    """The backend registered as `name`, for `model` at `dtype` (None: the backend's defaults)."""
    factory: BackendFactory = entry("backend", name).obj
    backend: TextBackend = factory(model=model, dtype=dtype, **dict(options or {}))
    return backend


def device_of(backend: Any) -> str:
    """What the engine runs on, as the backend describes it (`device`: "cpu, 2 threads", a GPU's
    name); "" when it does not say."""
    try:
        return str(getattr(backend, "device", "") or "")
    except Exception:  # noqa: BLE001  (a description must never fail a chunk)
        return ""
