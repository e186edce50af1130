"""The vLLM engine in its own venv, driven over JSON lines by `vllm_bridge.VllmSubprocessBackend`.

Run as `<.venv-vllm>/bin/python -m legival_core.backends.vllm_worker '<VllmOptions JSON>'` with the
repo root on PYTHONPATH. The engine code sits under `if __name__ == "__main__":` because vLLM's engine
core starts child processes that re-import the main module.

Protocol (one JSON object per line): the worker first answers `{"ready": true, "model_id", "context_length", "device"}`
(or `{"error", "traceback"}`), then for each request line `{"op": ...}` one answer line:
  generate      {"requests": [request...]}                 -> {"completions": [completion...]}
  render_chat   {"messages": [...], "continue_final_message"} -> {"text"}
  count_tokens  {"texts": [...]}                           -> {"counts": [...]}
  counters      {}                                         -> {"hits", "queries"}
  close         {}                                         -> {"closed": true}, then exit
vLLM logs to stdout, so the protocol keeps a private duplicate of fd 1 and fd 1 is pointed at stderr.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import asdict
from typing import IO, Any

from legival_core.backends.base import ChatMessage, GenerationRequest, Sampling, device_of
from legival_core.backends.stop_rules import StopRuleSpec


def request_from_json(obj: dict[str, Any]) -> GenerationRequest:
    rule = obj.get("stop_rule")
    sampling = obj.get("sampling")
    return GenerationRequest(
        request_id=str(obj["request_id"]),
        prompt=str(obj["prompt"]),
        max_new_tokens=int(obj["max_new_tokens"]),
        group=str(obj.get("group", "")),
        stop_rule=StopRuleSpec.from_json(rule) if rule else None,
        repetition_penalty=float(obj.get("repetition_penalty", 1.0)),
        sampling=Sampling(**sampling) if sampling else None,
    )


def _serve(backend: Any, proto_in: IO[str], proto_out: IO[str]) -> None:
    def send(obj: dict[str, Any]) -> None:
        proto_out.write(json.dumps(obj) + "\n")
        proto_out.flush()

    send({"ready": True, "model_id": backend.model_id, "context_length": backend.context_length,
          "device": device_of(backend)})
    for line in proto_in:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            op = msg.get("op")
            if op == "generate":
                reqs = [request_from_json(r) for r in msg["requests"]]
                send({"completions": [asdict(c) for c in backend.generate(reqs)]})
            elif op == "render_chat":
                messages = [ChatMessage(role=m["role"], content=m["content"]) for m in msg["messages"]]
                send({"text": backend.render_chat(messages, bool(msg["continue_final_message"]))})
            elif op == "count_tokens":
                send({"counts": [backend.count_tokens(t) for t in msg["texts"]]})
            elif op == "counters":
                c = backend.prefix_cache_counters()
                send({"hits": c.hits, "queries": c.queries})
            elif op == "close":
                send({"closed": True})
                return
            else:
                send({"error": f"unknown op {op!r}"})
        except Exception as exc:  # reported to the parent, which raises it there
            send({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})


def main(argv: list[str]) -> int:
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        from legival_core.backends.vllm_backend import VllmBackend, VllmOptions

        options = VllmOptions(**json.loads(argv[1]))
        backend = VllmBackend(options)
    except Exception as exc:
        proto_out.write(
            json.dumps({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}) + "\n"
        )
        proto_out.flush()
        return 1
    try:
        _serve(backend, sys.stdin, proto_out)
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
