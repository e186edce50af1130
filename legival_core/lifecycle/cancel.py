"""Cancelling a run cleanly: a signal (SIGTERM from Prefect or a scheduler, Ctrl-C) or a cancel from the
Prefect API sets one event; `run_stage` stops at its next batch boundary (what a batch computed is
committed first, in its one transaction; the chunks still in flight are dropped), raising `Cancelled`.
Content keys make the rerun compute exactly what was not committed (docs/CLI.md "Failure contract")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_EVENT = threading.Event()
_reason: list[str] = []
_hooks: list[Callable[[], None]] = []

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """The run was cancelled; what was committed before stays stored."""


def request_cancel(reason: str) -> None:
    """Ask every stage of this process to stop at its next batch boundary (idempotent: the first
    reason counts), and run the cancel hooks once, on a thread of their own (`on_cancel`)."""
    first = not _EVENT.is_set()
    if not _reason:
        _reason.append(reason)
    _EVENT.set()
    if first and _hooks:
        threading.Thread(target=_run_hooks, name="legival-cancel-hooks", daemon=True).start()


def on_cancel(hook: Callable[[], None]) -> None:
    """Run `hook` when a cancel is requested: what cannot reach a batch boundary by itself is stopped
    there (the engines on Ray drop the chunks they hold: `tasks.ray_pool`). Registered once per hook."""
    if hook not in _hooks:
        _hooks.append(hook)


def _run_hooks() -> None:
    for hook in list(_hooks):
        try:
            hook()
        except Exception as e:  # noqa: BLE001 - a hook that fails must not keep the others from running
            log.warning("cancel hook %s failed: %s: %s", getattr(hook, "__name__", hook), type(e).__name__, e)


def cancel_requested() -> bool:
    return _EVENT.is_set()


def cancel_reason() -> str:
    return _reason[0] if _reason else ""


def raise_if_cancelled(where: str) -> None:
    if _EVENT.is_set():
        raise Cancelled(f"cancelled ({cancel_reason()}) before {where}")


def reset_cancel() -> None:
    """Forget a cancel (a process that runs several commands, the tests)."""
    _reason.clear()
    _EVENT.clear()
