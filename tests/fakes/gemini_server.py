"""A local server speaking the Gemini REST protocol that google-genai talks to.

Routes (any API version prefix, e.g. /v1 or /v1beta):
- POST /{v}/models/{model}:generateContent -> GenerateContentResponse or a Google error body;
- POST /{v}/models/{model}:batchGenerateContent -> a batch operation (inline requests only);
- GET  /{v}/batches/{id} -> RUNNING for the first `batch_pending_polls` polls, then SUCCEEDED with
  `metadata.output.inlinedResponses.inlinedResponses` built by the same responder;
- Files API as google-genai drives it: POST /upload/{v}/files (`X-Goog-Upload-Command: start`, answers
  an `X-Goog-Upload-URL`), POST to that URL (`upload[, finalize]` chunks at `X-Goog-Upload-Offset`;
  the last one answers `{"file": ...}`), GET /{v}/files/{id}, and GET [/download]/{v}/files/{id}:download
  ?alt=media for a generated file;
- a batch whose `inputConfig.fileName` names an uploaded JSONL file (`{"key", "request"}` lines) answers
  in a generated result file (`{"key", "response"|"error"}` lines) named by `output.responsesFile`.

The default responder is a toy lexical judge: it flags every numbered step `[k] ...` that starts
with "Wait", so replies depend on the request and concurrent tests stay deterministic.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

from tests.fakes import Canned, FakeServer, Recorded, judgement

_STEP = re.compile(r"^\[(\d+)\] (.*)$", re.M)
_GENERATE = re.compile(r"^/v[^/]*/models/([^/:]+):generateContent$")
_BATCH_CREATE = re.compile(r"^/v[^/]*/models/([^/:]+):batchGenerateContent$")
_BATCH_GET = re.compile(r"^/v[^/]*/batches/([^/?]+)")
_UPLOAD = re.compile(r"^/upload/(?:v[^/]*/)?files(?:\?(.*))?$")
_FILE_DOWNLOAD = re.compile(r"^(?:/download)?/v[^/]*/files/([^/:?]+):download")
_FILE_GET = re.compile(r"^/v[^/]*/files/([^/:?]+)$")

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def user_texts(body: dict[str, Any]) -> list[str]:
    users = [c for c in body.get("contents", []) if c.get("role", "user") == "user"]
    return ["".join(p.get("text", "") for p in u["parts"]) for u in users]


def last_user_text(body: dict[str, Any]) -> str:
    texts = user_texts(body)
    return texts[-1] if texts else ""


def lexical_responder(body: dict[str, Any]) -> Canned:
    """Judge the trace in the FIRST user turn (a repair conversation adds later turns)."""
    texts = user_texts(body)
    text = texts[0] if texts else ""
    steps = [int(k) for k, s in _STEP.findall(text) if s.startswith("Wait")]
    return Canned.json(judgement(steps))


class FakeGemini(FakeServer):
    def __init__(
        self,
        responder: Callable[[Any], Canned] = lexical_responder,
        delay_s: float = 0.0,
        batch_pending_polls: int = 1,
        echo_key_in_errors: bool = False,
    ) -> None:
        super().__init__(delay_s)
        self.echo_key_in_errors = echo_key_in_errors
        self.responder = responder
        self.batch_pending_polls = batch_pending_polls
        self.batches: dict[str, dict[str, Any]] = {}
        # Files by id: {"meta": File JSON, "data": bytes, "size": declared size, "done": finalized}.
        self.files: dict[str, dict[str, Any]] = {}
        self._blk = threading.Lock()

    def generate_calls(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(":generateContent")]

    @staticmethod
    def _response_obj(c: Canned) -> dict[str, Any]:
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": c.text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": c.input_tokens,
                "candidatesTokenCount": c.output_tokens,
                "totalTokenCount": c.input_tokens + c.output_tokens,
            },
            "modelVersion": "fake-gemini",
        }

    @staticmethod
    def _error_obj(c: Canned) -> dict[str, Any]:
        return {
            "error": {
                "code": c.status,
                "message": c.text or "error",
                "status": _STATUS_NAMES.get(c.status, "UNKNOWN"),
            }
        }

    def route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
        status, headers, payload = self._route(rec)
        if status != 200 and self.echo_key_in_errors:
            # A badly behaved server (or proxy) that echoes the credential back in its error text.
            key = rec.headers.get("x-goog-api-key", "")
            payload = payload.replace(b'"message": "', f'"message": "key {key} rejected; '.encode(), 1)
        return status, headers, payload

    def _route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
        if rec.method == "POST" and _GENERATE.match(rec.path):
            c = self.next_canned(self.responder, rec.body)
            if c.raw_body is not None:
                return c.status, {"Content-Type": "application/json"}, c.raw_body
            if c.status != 200:
                return self.json_response(c.status, self._error_obj(c), c.headers)
            return self.json_response(200, self._response_obj(c), c.headers)
        m = _BATCH_CREATE.match(rec.path)
        if rec.method == "POST" and m:
            return self._batch_create(m.group(1), rec.body)
        m = _BATCH_GET.match(rec.path)
        if rec.method == "GET" and m:
            return self._batch_get(m.group(1))
        m = _UPLOAD.match(rec.path)
        if rec.method == "POST" and m:
            return self._upload(rec, urllib.parse.parse_qs(m.group(1) or ""))
        m = _FILE_DOWNLOAD.match(rec.path)
        if rec.method == "GET" and m:
            f = self.files.get(m.group(1))
            if f is None or not f["generated"]:
                return self._not_found("no such downloadable file")
            return 200, {"Content-Type": "application/octet-stream"}, f["data"]
        m = _FILE_GET.match(rec.path)
        if rec.method == "GET" and m:
            f = self.files.get(m.group(1))
            return self.json_response(200, f["meta"]) if f else self._not_found("no such file")
        return self.json_response(
            404, {"error": {"code": 404, "message": f"no route {rec.path}", "status": "NOT_FOUND"}}
        )

    def _not_found(self, message: str) -> tuple[int, dict[str, str], bytes]:
        return self.json_response(404, {"error": {"code": 404, "message": message, "status": "NOT_FOUND"}})

    def _add_file(self, meta: dict[str, Any], data: bytes, generated: bool) -> str:
        with self._blk:
            file_id = f"f{len(self.files) + 1}"
            meta = {**meta, "name": f"files/{file_id}", "state": "ACTIVE" if generated else "PROCESSING"}
            if generated:
                meta["source"] = "GENERATED"
                meta["downloadUri"] = f"{self.url}/download/v1beta/files/{file_id}:download?alt=media"
            self.files[file_id] = {"meta": meta, "data": data, "generated": generated}
        return file_id

    def uploaded(self, name: str) -> bytes:
        """The bytes received for file `files/<id>`."""
        return bytes(self.files[name.removeprefix("files/")]["data"])

    def _upload(self, rec: Recorded, query: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        command = rec.headers.get("x-goog-upload-command", "")
        if command == "start":
            # google-genai sends the File with snake_case keys (the API takes either); answer camelCase.
            sent = dict((rec.body or {}).get("file") or {})
            meta = {re.sub(r"_([a-z])", lambda g: g.group(1).upper(), k): v for k, v in sent.items()}
            meta.setdefault("mimeType", rec.headers.get("x-goog-upload-header-content-type", ""))
            meta["sizeBytes"] = rec.headers.get("x-goog-upload-header-content-length", "0")
            file_id = self._add_file(meta, b"", generated=False)
            url = f"{self.url}/upload/v1beta/files?upload_id={file_id}&upload_protocol=resumable"
            return self.json_response(200, {}, {"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
        file_id = (query.get("upload_id") or [""])[0]
        f = self.files.get(file_id)
        if f is None:
            return self._not_found("no such upload")
        offset = int(rec.headers.get("x-goog-upload-offset", "-1"))
        if offset != len(f["data"]):
            return self.json_response(
                400, {"error": {"code": 400, "message": "bad offset", "status": "INVALID_ARGUMENT"}}
            )
        f["data"] += rec.raw
        if "finalize" not in command:
            return self.json_response(200, {}, {"X-Goog-Upload-Status": "active"})
        f["meta"]["state"] = "ACTIVE"
        f["meta"]["sizeBytes"] = str(len(f["data"]))
        return self.json_response(200, {"file": f["meta"]}, {"X-Goog-Upload-Status": "final"})

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        c = self.next_canned(self.responder, request)
        if c.status != 200:
            return {"error": {"code": c.status, "message": c.text or "error"}}
        return {"response": self._response_obj(c)}

    def _batch_create(self, model: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        batch = body["batch"]
        src = batch["inputConfig"]
        responses_file = None
        if "fileName" in src:
            f = self.files.get(str(src["fileName"]).removeprefix("files/"))
            if f is None or f["meta"].get("state") != "ACTIVE":
                return self._not_found(f"no uploaded file {src['fileName']}")
            lines = [json.loads(x) for x in f["data"].splitlines() if x.strip()]
            out = [{"key": ln["key"], **self._answer(ln["request"])} for ln in lines]
            data = b"".join(json.dumps(o).encode("utf-8") + b"\n" for o in out)
            result_id = self._add_file({"mimeType": "application/jsonl"}, data, generated=True)
            responses_file = f"files/{result_id}"
            n = len(lines)
        else:
            items = src["requests"]["requests"]
            out = [{"metadata": it.get("metadata", {}), **self._answer(it["request"])} for it in items]
            n = len(items)
        with self._blk:
            job_id = f"job{len(self.batches) + 1}"
            self.batches[job_id] = {
                "model": model,
                "display": batch.get("displayName", ""),
                "polls": 0,
                "output": out,
                "responses_file": responses_file,
                "n": n,
            }
        return self.json_response(200, self._job(job_id, "BATCH_STATE_PENDING"))

    def _job(self, job_id: str, state: str, with_output: bool = False) -> dict[str, Any]:
        b = self.batches[job_id]
        meta: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{b['model']}",
            "displayName": b["display"],
            "state": state,
            "name": f"batches/{job_id}",
        }
        if with_output and b["responses_file"]:
            meta["output"] = {"responsesFile": b["responses_file"]}
        elif with_output:
            meta["output"] = {"inlinedResponses": {"inlinedResponses": b["output"]}}
        return {"name": f"batches/{job_id}", "metadata": meta}

    def _batch_get(self, job_id: str) -> tuple[int, dict[str, str], bytes]:
        with self._blk:
            if job_id not in self.batches:
                return self.json_response(
                    404, {"error": {"code": 404, "message": "no such batch", "status": "NOT_FOUND"}}
                )
            b = self.batches[job_id]
            b["polls"] += 1
            done = b["polls"] > self.batch_pending_polls
        if not done:
            return self.json_response(200, self._job(job_id, "BATCH_STATE_RUNNING"))
        return self.json_response(200, self._job(job_id, "BATCH_STATE_SUCCEEDED", with_output=True))
