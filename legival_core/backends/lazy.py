"""A backend that is built on first use: a fully cached rerun never loads a model."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from legival_core.backends.base import ChatMessage, Completion, GenerationRequest, TextBackend


class LazyBackend:
    def __init__(self, factory: Callable[[], TextBackend]) -> None:
        self._factory = factory
        self._backend: TextBackend | None = None
        self._load: tuple[float, float] | None = None

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    def load(self) -> None:
        """Build the backend now (e.g. while other work runs) instead of on first use."""
        self._get()

    def take_load(self) -> tuple[float, float] | None:
        """(epoch seconds it started, seconds it took) of the model load, once: the first chunk after
        it reports it (`legival_core.stages.transfer.RolloutChunk`), a prewarmed load included."""
        load, self._load = self._load, None
        return load

    def _get(self) -> TextBackend:
        if self._backend is None:
            started, t0 = time.time(), time.perf_counter()
            self._backend = self._factory()
            self._load = (started, time.perf_counter() - t0)
        return self._backend

    @property
    def model_id(self) -> str:
        return self._get().model_id

    @property
    def context_length(self) -> int:
        return self._get().context_length

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        return self._get().render_chat(messages, continue_final_message)

    def count_tokens(self, text: str) -> int:
        return self._get().count_tokens(text)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return self._get().generate(requests)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __getattr__(self, name: str) -> Any:  # backend-specific extras (e.g. prefix-cache counters)
        return getattr(self._get(), name)
