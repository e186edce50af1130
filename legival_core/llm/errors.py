"""The errors of a model call and their ONE classification: which httpx errors and HTTP statuses are
worth retrying (`TransientError`), which mean the endpoint cannot be reached at all (`ConnectionFailed`),
and which a retry cannot fix (`PermanentError`). Every message is scrubbed of secrets (`scrub`) before
it leaves this package; `Secret` holds a key without ever showing it.

Two status policies, not one, because the clients built on them always differed and must keep their
wire behaviour: `STRICT_STATUSES` (only 200 is an answer; 408, 429, 500, 502, 503, 504 are retried:
the judges, which talk to paid APIs) and `LENIENT_STATUSES` (any status under 400 is an answer; 408,
409, 429 and every 5xx are retried: the student backend and the teacher engine, which talk to the
model servers we run).
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

RETRYABLE_HTTP_STATUS: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})
"""The statuses a judge retries (a Gemini API error code is classified with them too)."""


@dataclass(frozen=True, slots=True)
class Statuses:
    """Which HTTP statuses are an answer (`ok`) and which failures are worth retrying (`retryable`);
    every other status is a `PermanentError`."""

    ok: Callable[[int], bool]
    retryable: Callable[[int], bool]


STRICT_STATUSES = Statuses(ok=lambda s: s == 200, retryable=RETRYABLE_HTTP_STATUS.__contains__)
LENIENT_STATUSES = Statuses(ok=lambda s: s < 400, retryable=lambda s: s >= 500 or s in (408, 409, 429))


# --------------------------------------------------------------------------------------------- errors


class LLMError(RuntimeError):
    """Any failure of a model call surfaced to a caller; its message has been scrubbed of secrets.

    An error classified from an httpx call keeps what it came from: `response` (an HTTP status that is
    not an answer) or `exception` (the httpx transport error), for a caller that reports them its own
    way; both are None otherwise."""

    response: httpx.Response | None = None
    exception: httpx.TransportError | None = None


class TransientError(LLMError):
    """A failure worth retrying (429, 5xx, 408, timeouts, dropped connections)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConnectionFailed(TransientError):
    """The endpoint could not be reached at all (connection refused, unknown host, network unreachable,
    connect timeout): retried only `RetryPolicy.connect_retries` times, after a short delay, and what
    opens a run's circuit breaker (`breaker.Breaker`)."""


class PermanentError(LLMError):
    """A failure that a retry cannot fix (400, 401, 403, 404, ...)."""


class EndpointRefused(PermanentError):
    """The endpoint refuses every request alike (`ENDPOINT_STATUSES`: the key, the account, the model
    or the URL is wrong): not retried, and not the request's fault either, so what asked is not stored
    as failed: once the user fixes the cause, a rerun does it (docs/judge.md "Which failures are stored")."""


ENDPOINT_STATUSES: frozenset[int] = frozenset({401, 402, 403, 404, 405})
"""Statuses that say "not with this key, account, model or URL", whatever the request."""


class Secret:
    """A string that never shows itself in repr()/str()."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('[REDACTED]')"

    __str__ = __repr__


# ----------------------------------------------------------------------------------------- messages


_URL_KEY = re.compile(r"(?i)((?:api[_-]?)?key=)[^&\s'\"]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]+")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets from a message: the given strings, `key=...` query values and bearer tokens."""
    out = text
    for s in secrets:
        if s:
            out = out.replace(s, "[REDACTED]")
    out = _URL_KEY.sub(r"\1[REDACTED]", out)
    return _BEARER.sub(r"\1[REDACTED]", out)


_ERRNO = re.compile(r"^\[Errno -?\d+\]\s*")


def cannot_connect(error: BaseException, url: str | None, why: str | None = None) -> str:
    """`cannot connect to SCHEME://HOST[:PORT]: why` for a connection that failed: the host of the
    request the error names (an httpx error carries it), else `url`; never a path or a query string."""
    where = url or "the endpoint"
    try:
        request: Any = getattr(error, "request", None)  # httpx: RuntimeError when it has none
        u = request.url
        host = f"[{u.host}]" if ":" in u.host else u.host
        where = f"{u.scheme}://{host}" + (f":{u.port}" if u.port else "")
    except Exception:  # no request, or not an httpx error: keep the configured url
        pass
    text = why or _ERRNO.sub("", str(error)).strip() or type(error).__name__
    return f"cannot connect to {where}: {text[:1].lower()}{text[1:]}"


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, dt.timestamp() - now())


# ----------------------------------------------------------------------------------- classification


def _same(text: str) -> str:
    return text


def transport_error(
    e: httpx.TransportError, url: str | None, clean: Callable[[str], str] = _same
) -> TransientError:
    """The error for an httpx transport failure: `ConnectionFailed` when the endpoint could not be
    reached (`url`: where, when the error names no request), else a `TransientError`. `clean` scrubs."""
    if isinstance(e, httpx.ConnectTimeout):
        out: TransientError = ConnectionFailed(clean(cannot_connect(e, url, "connect timeout")))
    elif isinstance(e, httpx.ConnectError):
        out = ConnectionFailed(clean(cannot_connect(e, url)))
    elif isinstance(e, httpx.TimeoutException):
        out = TransientError(f"timeout ({type(e).__name__})")
    else:
        out = TransientError(clean(f"transport error ({type(e).__name__}: {e})"))
    out.exception = e
    return out


def status_error(
    status: int, message: str, retry_after: float | None = None, statuses: Statuses = STRICT_STATUSES
) -> TransientError | PermanentError:
    """The error for an HTTP status that is not an answer (`message` already scrubbed)."""
    if statuses.retryable(status):
        return TransientError(message, retry_after)
    if status in ENDPOINT_STATUSES:
        return EndpointRefused(message)
    return PermanentError(message)


def response_error(
    r: httpx.Response, statuses: Statuses, clean: Callable[[str], str] = _same
) -> TransientError | PermanentError:
    """`HTTP <status>: <the body's first 500 characters>` as `status_error` classifies it (a
    Retry-After header is read)."""
    err = status_error(r.status_code, clean(f"HTTP {r.status_code}: {r.text[:500]}"),
                       parse_retry_after(r.headers.get("retry-after")), statuses)
    err.response = r
    return err
