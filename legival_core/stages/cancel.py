"""Cancelling a run cleanly: a signal (SIGTERM from Prefect or a scheduler, Ctrl-C) or a cancel from the
Prefect API sets one event; `run_stage` stops at its next batch boundary (what a batch computed is
committed first, in its one transaction; the chunks still in flight are dropped), raising `Cancelled`.
Content keys make the rerun compute exactly what was not committed (docs/CLI.md "Failure contract")."""

from __future__ import annotations

import threading

_EVENT = threading.Event()
_reason: list[str] = []


class Cancelled(Exception):
    """The run was cancelled; what was committed before stays stored."""


def request_cancel(reason: str) -> None:
    """Ask every stage of this process to stop at its next batch boundary (idempotent: the first
    reason counts)."""
    if not _reason:
        _reason.append(reason)
    _EVENT.set()


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
