"""Local HTTP servers that speak real provider protocols, for tests that must not touch the internet.

`FakeServer` is the shared scaffolding: a ThreadingHTTPServer on a free 127.0.0.1 port, a record of
every request (method, path, lower-cased headers, parsed JSON body), an optional per-request delay,
and a FIFO script of canned replies consumed before the default responder is asked.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


@dataclass
class Canned:
    """One scripted reply: `text` is the model's reply text for a 200; otherwise an HTTP error."""

    text: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    input_tokens: int = 100
    output_tokens: int = 20

    @staticmethod
    def json(obj: Any) -> Canned:
        return Canned(text=json.dumps(obj))

    @staticmethod
    def error(status: int, retry_after: str | None = None, message: str = "error") -> Canned:
        c = Canned(status=status, text=message)
        if retry_after is not None:
            c.headers["Retry-After"] = retry_after
        return c


def judgement(steps: list[int], final_answer: str = "42", confidence: float = 0.9) -> dict[str, Any]:
    """A schema-valid judge reply flagging `steps`."""
    return {
        "backtracking_detected": bool(steps),
        "final_answer": final_answer,
        "backtracking_steps": [{"step_number": s, "reason": "changes course"} for s in steps],
        "confidence": confidence,
        "overall_reasoning": "scripted",
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


class FakeServer:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.requests: list[Recorded] = []
        self.script: deque[Canned] = deque()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One buffered write per response and no Nagle: otherwise headers and body go out as two
            # small packets and delayed ACKs add ~20-40 ms to every call.
            wbufsize = -1
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                rec = Recorded(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw
                )
                with owner._lock:
                    owner.requests.append(rec)
                if owner.delay_s:
                    time.sleep(owner.delay_s)
                status, headers, payload = owner.route(rec)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                self._handle()

            def do_GET(self) -> None:
                self._handle()

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_canned(self, responder: Callable[[Any], Canned], body: Any) -> Canned:
        with self._lock:
            if self.script:
                return self.script.popleft()
        return responder(body)

    def route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
        raise NotImplementedError

    @staticmethod
    def json_response(
        status: int, obj: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return status, h, json.dumps(obj).encode("utf-8")
