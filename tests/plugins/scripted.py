"""Test backends, registered through the plugin mechanism (`LEGIVAL_PLUGINS=tests.plugins.scripted`,
set by tests/conftest.py so that subprocesses, Prefect workers and Ray engines see them too).

`ScriptedBackend` is a deterministic backend for fast tests of the transfer pipeline: the continuation
is a function of the rendered prompt. It keeps the real interface (ChatML rendering with continue_final_message,
stop rules applied per token, overflow, prefix-cache accounting by shared whitespace tokens), so the
pipeline code under test is exactly the production code. A request's `repetition_penalty` is
recorded in `calls` and otherwise ignored."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from legival_core.backends.base import BackendInfo, ChatMessage, Completion, GenerationRequest
from legival_core.registry import register

Script = Callable[[str], str]


class ScriptedBackend:
    def __init__(self, script: Script, context_length: int = 4096, model_id: str = "scripted") -> None:
        self.script = script
        self.context_length = context_length
        self.model_id = model_id
        self.calls: list[GenerationRequest] = []

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        parts = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
        if continue_final_message:
            last = messages[-1]
            parts[-1] = f"<|im_start|>{last.role}\n{last.content}"
        return "".join(parts)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        seen: dict[str, list[list[str]]] = {}
        for r in requests:
            self.calls.append(r)
            n_prompt = self.count_tokens(r.prompt)
            if n_prompt >= self.context_length:
                out.append(Completion(r.request_id, "", n_prompt, 0, "overflow", 0, 0))
                continue
            words = r.prompt.split()
            cached = max((_common(words, w) for w in seen.get(r.group, [])), default=0) if r.group else 0
            seen.setdefault(r.group, []).append(words)
            tokens = self.script(r.prompt).split(" ")
            text, reason = "", "stop"
            for i, tok in enumerate(tokens[: r.max_new_tokens]):
                text = tok if i == 0 else f"{text} {tok}"
                if r.stop_rule is not None and r.stop_rule(text):
                    reason = "rule"
                    break
            else:
                if len(tokens) > r.max_new_tokens:
                    reason = "length"
            out.append(Completion(r.request_id, text, n_prompt, len(text.split(" ")) if text else 0,
                                  reason, n_prompt - cached, cached))  # type: ignore[arg-type]
        return out

    def close(self) -> None:
        return None


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def echo_script(prompt: str) -> str:
    return "The answer is 0."


@register("backend", "scripted", meta=BackendInfo(dtypes=("float32", "bfloat16")))
def make_scripted(model: str | None = None, dtype: str | None = None, script: Script = echo_script,
                  context_length: int = 4096) -> ScriptedBackend:
    """A scripted test backend (tests build it directly with their own script)."""
    return ScriptedBackend(script, context_length=context_length, model_id=model or "scripted")


def demo_script(prompt: str) -> str:
    """Answers 'The answer is N.' where N depends on the prompt: right or wrong, stable."""
    h = int.from_bytes(hashlib.sha1(prompt.encode()).digest()[:4], "big")
    if h % 4 == 0:
        return "Let me think about this step by step and keep going without an answer"
    return f"So we add them up. The answer is {h % 7 * 10}."


class _SlowScripted(ScriptedBackend):
    """`delay_s` per request; `hold_after` calls of `generate`, then every further call waits until
    the file `gate` exists (a run held mid-transfer for as long as a test needs, without a clock)."""

    def __init__(self, delay_s: float, hold_after: int | None = None, gate: str | None = None,
                 poison: str | None = None, hold_mark: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay_s = delay_s
        self.hold_after, self.gate, self.poison, self.hold_mark = hold_after, gate, poison, hold_mark
        self.generate_calls = 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if self.poison and any(self.poison in r.prompt for r in requests):
            raise ValueError("a poisoned prompt (the scripted backend's `poison` option)")
        if self.hold_after is not None and self.generate_calls >= self.hold_after:
            assert self.gate is not None, "hold_after needs a gate file"
            _wait_for_gate(self.gate, self.hold_mark)
        self.generate_calls += 1
        if self.delay_s:
            time.sleep(self.delay_s * len(requests))
        return super().generate(requests)


def _wait_for_gate(gate: str, mark: str | None) -> None:
    """Say where we are (`mark`, a file), then wait until the file `gate` exists: an engine held for as
    long as a test needs (a cancel kills its process; nothing else releases it)."""
    if mark:
        with open(mark, "a", encoding="utf-8") as f:
            f.write("held\n")
    while not os.path.exists(gate):
        time.sleep(0.02)


@register("backend", "scripted-demo", meta=BackendInfo(dtypes=("float32", "bfloat16")))
def make_scripted_demo(model: str | None = None, dtype: str | None = None, delay_s: float = 0.0,
                       context_length: int = 4096, hold_after: int | None = None, gate: str | None = None,
                       poison: str | None = None, hold_load: bool = False, hold_mark: str | None = None,
                       **_: Any) -> ScriptedBackend:
    """`scripted-demo`: a deterministic student/teacher for fast orchestration tests.

    The continuation is a pure function of the rendered prompt (the real pipeline grades it), so an
    interrupted and resumed run must store exactly the rows of an uninterrupted one. `delay_s` sleeps
    per request (for tests about timing); `hold_after` + `gate` hold the engine after that many calls
    until the gate file exists (a run to interrupt mid-transfer); `hold_load`: the engine's model load
    holds the same way (a run to interrupt while its engines start); `hold_mark`: a file written when
    it holds; `poison`: a call whose prompt holds this text raises (a unit that fails alone).
    Execution options, not part of the key."""
    if hold_load:
        assert gate is not None, "hold_load needs a gate file"
        _wait_for_gate(gate, hold_mark)
    return _SlowScripted(delay_s, hold_after=hold_after, gate=gate, poison=poison, hold_mark=hold_mark,
                         script=demo_script,
                         context_length=context_length, model_id="scripted-demo")
