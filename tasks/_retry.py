"""Retry only what can succeed on a second try (lost engines, network errors), never a bug."""

from __future__ import annotations

from typing import Any

from tasks.engines import is_transient


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        exc = state.result(raise_on_failure=False)
    except Exception as e:  # the result itself could not be read: do not loop on it
        exc = e
    return isinstance(exc, BaseException) and is_transient(exc)
