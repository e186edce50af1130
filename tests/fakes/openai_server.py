"""A local server speaking the OpenAI chat-completions protocol (POST /v1/chat/completions).

The default responder is the same toy lexical judge as the Gemini fake: it flags every numbered
step `[k] ...` of the last user message that starts with "Wait".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from tests.fakes import Canned, FakeServer, Recorded, judgement

_STEP = re.compile(r"^\[(\d+)\] (.*)$", re.M)


def lexical_responder(body: dict[str, Any]) -> Canned:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    text = users[0]["content"] if users else ""  # the trace; a repair conversation adds later turns
    steps = [int(k) for k, s in _STEP.findall(text) if s.startswith("Wait")]
    return Canned.json(judgement(steps))


class FakeOpenAI(FakeServer):
    def __init__(self, responder: Callable[[Any], Canned] = lexical_responder, delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.responder = responder

    def completion_calls(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
        if rec.method != "POST" or rec.path != "/v1/chat/completions":
            return self.json_response(
                404, {"error": {"message": f"no route {rec.path}", "type": "not_found"}}
            )
        c = self.next_canned(self.responder, rec.body)
        if c.raw_body is not None:
            return c.status, {"Content-Type": "application/json"}, c.raw_body
        if c.status != 200:
            return self.json_response(
                c.status, {"error": {"message": c.text, "type": "error", "code": c.status}}, c.headers
            )
        return self.json_response(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": rec.body.get("model", ""),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": c.input_tokens,
                    "completion_tokens": c.output_tokens,
                    "total_tokens": c.input_tokens + c.output_tokens,
                },
            },
            c.headers,
        )
