"""The `gemini` backtracking judge: Gemini 2.5 Flash through google-genai (SPEC section 3).

Key: passed in (a caller may resolve a Prefect Secret block) or read from GEMINI_API_KEY, else
GOOGLE_API_KEY. Endpoint: `base_url` argument, else LEGIVAL_GEMINI_BASE_URL, else the SDK default (which
also honours GOOGLE_GEMINI_BASE_URL). The SDK's own retries are switched off
(`HttpRetryOptions(attempts=1)`, which also disables its implicit connection-error retries) so the shared
loop in base.py does all retrying and counts it; a refused or unknown endpoint is a `ConnectionFailed`
(`cannot connect to ...`: one short retry, then the run's breaker).

Batch API (50% price): `submit_batch` sends inline requests (`BatchJobSource(inlined_requests=...)`, each
carrying `metadata` that names its trace and window, so results can be matched without the original
requests), `poll_batch` reads the job state, `collect_batch` parses `dest.inlined_responses`. Inline batches
are limited by the API's request size (about 20 MB): when the serialized requests exceed
`batch_file_threshold_bytes` (default 15 MB), or with `use_file=True`, the same requests are written as
JSONL (`{"key": ..., "request": {...}}` per line, the REST GenerateContentRequest the SDK would send
inline), uploaded through the Files API and the job is created with `src=<file name>`; `collect_batch` then
downloads `dest.file_name` (JSONL lines with `key` and `response` or `error`). A file line has no metadata,
so its `key` encodes the trace and window (`batch_keys.file_key`); both paths feed the same result parsing."""

from __future__ import annotations

import functools
import io
import json
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from legival_core.judges.base import (
    BaseJudge,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    MissingAPIKey,
    Reply,
    Turn,
    Window,
    WindowOutcome,
    _Tally,
    merge_windows,
)
from legival_core.judges.batch_keys import file_key as _file_key
from legival_core.judges.batch_keys import meta_from_key as _meta_from_key
from legival_core.judges.factory import JudgeInfo
from legival_core.judges.prompt import RESPONSE_JSON_SCHEMA
from legival_core.judges.records import BATCH_POLL_INTERVAL_S, BatchStatus
from legival_core.llm.errors import Secret, TransientError, parse_retry_after, status_error, transport_error
from legival_core.registry import register

if TYPE_CHECKING:
    from google.genai import types as gtypes

DEFAULT_MODEL = "gemini-2.5-flash"
KEY_ENV_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
BASE_URL_ENV = "LEGIVAL_GEMINI_BASE_URL"
DEFAULT_BATCH_FILE_THRESHOLD_BYTES = 15 * 1024 * 1024
TERMINAL_STATES = frozenset(
    {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
)


def _require_genai() -> Any:
    try:
        from google import genai
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError(
            "the gemini judge needs google-genai: pip install 'legival[judge]' (or pip install google-genai)"
        ) from None
    return genai


def resolve_api_key(api_key: str | None = None) -> str:
    """The explicit key, else GEMINI_API_KEY, else GOOGLE_API_KEY; a clear error when none is set."""
    if api_key:
        return api_key.strip()
    for var in KEY_ENV_VARS:
        v = os.environ.get(var, "").strip()
        if v:
            return v
    raise MissingAPIKey(
        "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment, or pass "
        "api_key= (e.g. from a Prefect Secret block)"
    )


@functools.cache
def _schema() -> gtypes.Schema:
    from google.genai import types

    return types.Schema(
        type=types.Type.OBJECT,
        properties={
            "backtracking_detected": types.Schema(type=types.Type.BOOLEAN),
            "final_answer": types.Schema(type=types.Type.STRING),
            "backtracking_steps": types.Schema(
                type=types.Type.ARRAY,
                items=types.Schema(
                    type=types.Type.OBJECT,
                    properties={
                        "step_number": types.Schema(type=types.Type.INTEGER),
                        "reason": types.Schema(type=types.Type.STRING),
                    },
                    required=["step_number", "reason"],
                ),
            ),
            "confidence": types.Schema(type=types.Type.NUMBER),
            "overall_reasoning": types.Schema(type=types.Type.STRING),
        },
        required=list(RESPONSE_JSON_SCHEMA["required"]),
    )


def _usage(resp: Any) -> tuple[int, int]:
    u = getattr(resp, "usage_metadata", None)
    if u is None:
        return 0, 0
    out = (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
    return int(u.prompt_token_count or 0), int(out)


def _text(resp: Any) -> str | None:
    """The reply's text parts joined (thought parts excluded), or None when there are none."""
    cands = getattr(resp, "candidates", None) or []
    if not cands or cands[0].content is None or not cands[0].content.parts:
        return None
    parts = [p.text for p in cands[0].content.parts if isinstance(p.text, str) and not p.thought]
    return "".join(parts) if parts else None


class GeminiJudge(BaseJudge):
    """Backtracking judge on the Gemini API (default gemini-2.5-flash, temperature 0.1 as in the paper)."""

    name = "gemini"
    default_model = DEFAULT_MODEL

    def __init__(self, *, batch_file_threshold_bytes: int = DEFAULT_BATCH_FILE_THRESHOLD_BYTES,
                 **settings: Any) -> None:
        """`settings`: `BaseJudge`'s; `batch_file_threshold_bytes`: see `submit_batch`."""
        self.batch_file_threshold_bytes = batch_file_threshold_bytes
        super().__init__(**settings)

    def _connect(self, base_url: str | None, api_key: str | None) -> None:
        self._key = Secret(resolve_api_key(api_key))
        self.base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        genai = _require_genai()
        from google.genai import types

        conns = max(100, self.limits.concurrency)
        http_options = types.HttpOptions(
            base_url=self.base_url,
            timeout=int(self.limits.timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
            client_args={"limits": httpx.Limits(max_connections=conns, max_keepalive_connections=conns)},
        )
        try:
            self._client = genai.Client(api_key=self._key.get(), http_options=http_options)
        except Exception as e:
            raise JudgeError(self.scrub(f"could not create the Gemini client: {e}")) from None

    def _secrets(self) -> tuple[str, ...]:
        return (self._key.get(),)
    # -- one call -------------------------------------------------------------------------------------

    def _config(self, system: str) -> gtypes.GenerateContentConfig:
        from google.genai import types

        return types.GenerateContentConfig(
            system_instruction=system,
            temperature=self.temperature,
            max_output_tokens=self.max_output_tokens,
            response_mime_type="application/json",
            response_schema=_schema(),
        )

    @staticmethod
    def _contents(turns: Sequence[Turn]) -> list[gtypes.Content]:
        from google.genai import types

        return [
            types.Content(role="user" if role == "user" else "model", parts=[types.Part(text=text)])
            for role, text in turns
        ]

    def _send(self, system: str, turns: Sequence[Turn]) -> Reply:
        from google.genai import errors

        try:
            resp = self._client.models.generate_content(
                model=self.model, contents=self._contents(turns), config=self._config(system)
            )
        except errors.APIError as e:
            headers = getattr(getattr(e, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
            msg = self.scrub(f"Gemini API error {e.code} {e.status or ''}: {e.message or ''}".strip())
            raise status_error(e.code, msg, retry_after) from None
        except httpx.TransportError as e:  # classified as every client's (`llm.errors`)
            raise transport_error(e, self.base_url or "the Gemini API", self.scrub) from None
        except json.JSONDecodeError as e:  # an HTTP 200 whose body is not JSON
            raise TransientError(self.scrub(f"unreadable response body ({e})")) from None
        tin, tout = _usage(resp)
        return Reply(_text(resp), tin, tout)

    # -- Batch API ------------------------------------------------------------------------------------

    def build_batch_requests(
        self, requests: Sequence[JudgeRequest]
    ) -> tuple[list[gtypes.InlinedRequest], list[JudgeResult]]:
        """Inline batch requests (one per window) and the results known without a call (empty/overflow)."""
        from google.genai import types

        inlined: list[types.InlinedRequest] = []
        local: list[JudgeResult] = []
        for r in requests:
            if r.m == 0:
                local.append(self._judge_one(r))
                continue
            system, plan = self._plan(r)
            if not plan.windows:
                local.append(JudgeResult(r.trace_id, "overflow", reason=plan.overflow_reason, windows=0))
                continue
            for i, w in enumerate(plan.windows):
                meta = {
                    "key": f"{r.trace_id}#{i}",
                    "trace_id": r.trace_id,
                    "window": str(i),
                    "windows": str(len(plan.windows)),
                    "first": str(w.first),
                    "last": str(w.last),
                    "m": str(r.m),
                }
                inlined.append(
                    types.InlinedRequest(
                        contents=self._contents(self._first_turns(r, w)),
                        config=self._config(system),
                        metadata=meta,
                    )
                )
        return inlined, local

    def batch_file_lines(self, inlined: Sequence[gtypes.InlinedRequest]) -> list[bytes]:
        """One JSONL line per inline request: `{"key": ..., "request": <REST GenerateContentRequest>}`.

        The request body is produced by the SDK's own inline-request converter, so a file line carries
        exactly what the inline path would send; the metadata moves into the key.
        """
        from google.genai import _common
        from google.genai import batches as gbatches

        api_client = self._client._api_client
        lines = []
        for it in inlined:
            wire = gbatches._InlinedRequest_to_mldev(api_client, it)
            wire = _common.encode_unserializable_types(_common.convert_to_dict(wire))
            line = {"key": _file_key(dict(it.metadata or {})), "request": wire["request"]}
            lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        return lines

    def submit_batch(
        self,
        requests: Sequence[JudgeRequest],
        display_name: str = "legival-backtracking",
        use_file: bool = False,
    ) -> str:
        """Create a Batch API job for `requests`; returns the job name (`batches/...`).

        Inline unless `use_file` or the serialized requests exceed `batch_file_threshold_bytes`; then
        the requests go up as an uploaded JSONL file.
        """
        from google.genai import types

        reqs = list(requests)
        self._check_budget(reqs, batch=True)
        inlined, _ = self.build_batch_requests(reqs)
        if not inlined:
            raise JudgeError("nothing to submit: every request is empty or over the token budget")
        try:
            lines = self.batch_file_lines(inlined)
        except Exception as e:  # the SDK's private converters moved or changed
            raise JudgeError(f"could not serialize the batch requests: {type(e).__name__}: {e}") from None
        as_file = use_file or sum(len(x) + 1 for x in lines) > self.batch_file_threshold_bytes
        step = "batch submission"
        try:
            if as_file:
                step = "batch file upload"
                data = b"\n".join(lines) + b"\n"
                uploaded = self._client.files.upload(
                    file=io.BytesIO(data),
                    config=types.UploadFileConfig(display_name=display_name, mime_type="jsonl"),
                )
                if not uploaded.name:
                    raise JudgeError("batch file upload returned no file name")
                step = "batch submission"
                src = types.BatchJobSource(file_name=uploaded.name)
            else:
                src = types.BatchJobSource(inlined_requests=inlined)
            job = self._client.batches.create(
                model=self.model, src=src, config=types.CreateBatchJobConfig(display_name=display_name)
            )
        except JudgeError:
            raise
        except Exception as e:
            raise JudgeError(self.scrub(f"{step} failed: {type(e).__name__}: {e}")) from None
        if not job.name:
            raise JudgeError("batch submission returned no job name")
        return str(job.name)

    def poll_batch(self, name: str) -> BatchStatus:
        try:
            job = self._client.batches.get(name=name)
        except Exception as e:
            raise JudgeError(self.scrub(f"batch poll failed: {type(e).__name__}: {e}")) from None
        state = getattr(job.state, "name", None) or str(job.state)
        return BatchStatus(name, state, state in TERMINAL_STATES, state == "JOB_STATE_SUCCEEDED")

    def wait_batch(
        self, name: str, interval_s: float = BATCH_POLL_INTERVAL_S, timeout_s: float = 86_400.0
    ) -> BatchStatus:
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.poll_batch(name)
            if st.done:
                return st
            if time.monotonic() > deadline:
                raise JudgeError(f"batch {name} still {st.state} after {timeout_s:.0f}s")
            self._sleep(interval_s)

    def _batch_responses(self, name: str, job: Any) -> list[gtypes.InlinedResponse]:
        """The job's outputs as InlinedResponse objects with `metadata`: inline as they come, or parsed
        from the downloaded result file (metadata rebuilt from each line's key)."""
        from google.genai import batches as gbatches
        from google.genai import types

        dest = job.dest
        if dest is None:
            return []
        if not dest.file_name:
            return list(dest.inlined_responses or [])
        try:
            data = self._client.files.download(file=dest.file_name)
        except Exception as e:
            raise JudgeError(self.scrub(f"batch result download failed: {type(e).__name__}: {e}")) from None
        out = []
        for n, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
                if obj.get("error") is None and obj.get("status") is not None:
                    obj["error"] = obj["status"]
                item = types.InlinedResponse._from_response(
                    response=gbatches._InlinedResponse_from_mldev(obj), kwargs={}
                )
            except Exception as e:
                raise JudgeError(
                    self.scrub(f"batch {name}: unreadable result line {n}: {type(e).__name__}: {e}")
                ) from None
            item.metadata = _meta_from_key(obj.get("key"))
            out.append(item)
        return out

    def collect_batch(self, name: str, requests: Sequence[JudgeRequest] | None = None) -> list[JudgeResult]:
        """Results of a finished job.

        With `requests` (the ones submitted): one result per request, in order; invalid replies get
        the same single repair re-ask as online judging (an online call), empty/overflow requests get
        their local result, and a request missing from the output is `failed`. Without `requests`: one
        result per trace found in the output, in output order; invalid replies are `failed` (a repair
        needs the trace text).
        """
        try:
            job = self._client.batches.get(name=name)
        except Exception as e:
            raise JudgeError(self.scrub(f"batch fetch failed: {type(e).__name__}: {e}")) from None
        state = getattr(job.state, "name", None) or str(job.state)
        if state != "JOB_STATE_SUCCEEDED":
            raise JudgeError(f"batch {name} is {state}, not JOB_STATE_SUCCEEDED")
        responses = self._batch_responses(name, job)
        by_id = {r.trace_id: r for r in requests} if requests is not None else {}
        grouped: dict[str, dict[int, WindowOutcome]] = {}
        expected: dict[str, int] = {}
        for resp in responses:
            meta = resp.metadata or {}
            tid = meta.get("trace_id")
            if tid is None:
                continue
            w = Window(int(meta["first"]), ("",) * (int(meta["last"]) - int(meta["first"]) + 1))
            expected[tid] = int(meta.get("windows", "1"))
            tally = _Tally()
            if resp.error is not None or resp.response is None:
                err = self.scrub(f"batch item error: {resp.error}")
                outcome = WindowOutcome(w, None, "", err, tally=tally)
            else:
                tin, tout = _usage(resp.response)
                reply = Reply(_text(resp.response), tin, tout)
                tally.add(reply)
                req = by_id.get(tid)
                if req is not None:
                    system, _ = self._plan(req)
                    real_w = Window(w.first, req.steps[w.first - 1 : w.last])
                    outcome = self._settle(
                        system, self._first_turns(req, real_w), reply, w, tally, can_repair=True
                    )
                else:
                    outcome = self._settle("", [], reply, w, tally, can_repair=False)
            grouped.setdefault(tid, {})[int(meta.get("window", "0"))] = outcome

        def result_for(tid: str) -> JudgeResult:
            parts = grouped.get(tid, {})
            n = expected.get(tid, 0)
            if not parts or len(parts) < n:
                return JudgeResult(
                    tid, "failed", reason=f"missing from batch output ({len(parts)}/{n} windows)"
                )
            return merge_windows(tid, [parts[i] for i in sorted(parts)])

        if requests is None:
            return [result_for(tid) for tid in grouped]
        _, local = self.build_batch_requests([r for r in requests if r.m == 0 or r.trace_id not in grouped])
        local_by_id = {r.trace_id: r for r in local}
        out = []
        for r in requests:
            if r.trace_id in grouped:
                out.append(result_for(r.trace_id))
            elif r.trace_id in local_by_id:
                out.append(local_by_id[r.trace_id])
            else:
                out.append(JudgeResult(r.trace_id, "failed", reason="missing from batch output"))
        return out


register("judge", "gemini", GeminiJudge, meta=JudgeInfo(llm=True, needs_model=False, batch=True))
