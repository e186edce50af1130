"""`scripted-demo`: a deterministic student for fast orchestration tests, through the registry.

The continuation is a pure function of the rendered prompt (the real pipeline grades it), so an
interrupted and resumed run must store exactly the rows of an uninterrupted one. `delay_s` sleeps per
request to make a run slow enough to interrupt; it is an execution option, not part of the student
key (`StudentConfig.student_key` hashes model, decoding, prompt version and profile only).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from legival_core.backends.base import Completion, GenerationRequest
from legival_core.backends.scripted import ScriptedBackend
from legival_core.registry import register


def demo_script(prompt: str) -> str:
    """Answers 'The answer is N.' where N depends on the prompt: right or wrong, stable."""
    h = int.from_bytes(hashlib.sha1(prompt.encode()).digest()[:4], "big")
    if h % 4 == 0:
        return "Let me think about this step by step and keep going without an answer"
    return f"So we add them up. The answer is {h % 7 * 10}."


class _SlowScripted(ScriptedBackend):
    def __init__(self, delay_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay_s = delay_s

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if self.delay_s:
            time.sleep(self.delay_s * len(requests))
        return super().generate(requests)


def make_scripted_demo(delay_s: float = 0.0, context_length: int = 4096, **_: Any) -> ScriptedBackend:
    return _SlowScripted(delay_s, script=demo_script, context_length=context_length, model_id="scripted-demo")


register("backend", "scripted-demo", make_scripted_demo)
