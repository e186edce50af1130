"""Retry only what can succeed on a second try (lost engines, network errors), never a bug."""

from __future__ import annotations

from typing import Any

from legival_core.llm.errors import LENIENT_STATUSES
from tasks.ray_pool import is_transient


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        exc = state.result(raise_on_failure=False)
    except Exception as e:  # the result itself could not be read: do not loop on it
        exc = e
    return isinstance(exc, BaseException) and is_transient(exc)


def is_transient_generation(e: BaseException) -> bool:
    """Also a teacher endpoint that drops the connection or answers a status the model-server policy
    retries (`llm.errors.LENIENT_STATUSES`: 408/409/429/5xx), after the engine's own retries; never
    once a cancel was requested."""
    from legival_core.lifecycle.cancel import cancel_requested

    if cancel_requested():
        return False
    if is_transient(e):
        return True
    try:
        import httpx
    except ImportError:  # pragma: no cover - httpx is a dependency
        return False
    if isinstance(e, httpx.TransportError):
        return True
    return isinstance(e, httpx.HTTPStatusError) and LENIENT_STATUSES.retryable(e.response.status_code)


def retry_generation(task: Any, task_run: Any, state: Any) -> bool:
    try:
        exc = state.result(raise_on_failure=False)
    except Exception as e:
        exc = e
    return isinstance(exc, BaseException) and is_transient_generation(exc)
