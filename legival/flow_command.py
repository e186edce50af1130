"""Running a flow from a command (`legival run`, `legival calibrate`): the Prefect server started early
(and owned: `tasks.lifecycle.processes`), a progress bar over the rollouts, SIGTERM/SIGINT/SIGHUP as a clean
cancel, and a failure as one line.

The flow runs on a thread of its own, not on the main thread: there, Prefect's flow engine would
install its own SIGTERM handler (`capture_sigterm`), which raises in the middle of whatever the main
thread does and aborts the flow at once, while shard threads still use Ray (the cancel then ran into a
Ray shut down under them, and a thread's Ray call started a new local Ray). Off the main thread
Prefect leaves the signals alone; `legival.lifecycle.cancel` hears them and the flow stops at its batch
boundaries."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from legival.console import fail, progress_bar


def run_flow(name: str, call: Callable[[Any], Any], command: str, argv: list[str],
             db: str | None = None) -> Any:
    """`call(flow)` with the flow `flows.<name>.<name>`, imported while the Prefect server starts; the
    flow's summary. A cancel stops at a batch boundary and exits as cancelled. A run whose stages
    failed for known outside reasons (`StagesFailed`) returns its summary with `failed_stages` (the
    command prints it, then `exit_if_stages_failed`). Any other failure exits with one `error:` line:
    a known condition in its words (exit 2), a bug with its crash log (exit 1; `argv`: the command
    line it gives to rerun). Tracebacks of Prefect and of threads go to the run's log (`db`: beside
    that store; `tasks.run_log`), which the error line names, never to the terminal."""
    server = _prestart_prefect_server()
    flow = getattr(importlib.import_module(f"flows.{name}"), name)
    from tasks.progress import BOARD
    from tasks.run_log import run_log

    if server is not None:
        _preimport_models()
        server.join()
        from tasks.lifecycle.processes import own_prefect_servers

        own_prefect_servers()

    from legival.lifecycle.cancel import cancellable

    def stored() -> dict[str, int]:
        return {"rollouts_committed_by_this_run": BOARD.committed}

    with run_log(db) as log, progress_bar("rollouts") as bar, cancellable(stored, command) as received:
        BOARD.add_sink(lambda done, total: bar.update(done=done, total=total))
        try:
            summary = _on_a_thread(lambda: call(flow))
        except BaseException as e:
            if received:  # cancelled: the flow stopped at a batch boundary (or Prefect's SIGTERM bridge)
                received.leave()
            if not isinstance(e, Exception):
                raise
            from legival_core.crashlog import causes
            from legival_core.stages.conditions import StagesFailed

            stages = next((c for c in causes(e) if isinstance(c, StagesFailed)), None)
            if stages is None:
                from legival.crash import failure  # the flow failed: one line, the traceback in a crash log

                line, code = failure(e, argv, name)
                fail(line + (f" (the run's log: {log})" if code == 2 and log is not None else ""), code)
            summary = {**stages.summary, "run_log": str(log) if log is not None else None}
        finally:
            if not received:
                BOARD.clear()
            from tasks.store_lock import close_stores

            close_stores()  # also the store the command handed over when the flow failed before using it
        if received:  # the signal came as the flow ended: it is complete, say so and exit as cancelled
            received.leave(why="after the run completed")
    return summary


def _on_a_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` on a thread of its own (module docstring); its result, or what it raised, here."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            outcome["error"] = e

    thread = threading.Thread(target=target, name="legival-flow", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def exit_if_stages_failed(summary: dict[str, Any]) -> None:
    """After a run's summary is printed: its stages that failed for known outside reasons as one
    `error:` line, exit 2 (every other stage and the report are stored)."""
    failed: dict[str, str] = summary.get("failed_stages") or {}
    if not failed:
        return
    not_run = summary.get("not_run_stages") or {}
    what = "; ".join(f"{stage}: {why}" for stage, why in failed.items())
    skipped = f"; not run, as they need it: {', '.join(not_run)}" if not_run else ""
    log = f"; the run's log: {summary['run_log']}" if summary.get("run_log") else ""
    fail(f"{len(failed)} stage(s) failed: {what}{skipped}. Every other stage and the report are stored (coverage.csv "
         f"says what is missing and why); fix the cause and rerun{log}")


def _prestart_prefect_server() -> threading.Thread | None:
    """Without a Prefect server (no PREFECT_API_URL) the flow's first API call starts a temporary
    one in a subprocess and waits for it: ~5 s, ~12 s the first time (database migrations). Started
    here on a thread, it comes up while this process imports the flows and the model libraries."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        return None

    def start() -> None:
        from prefect.server.api.server import SubprocessASGIServer

        try:
            SubprocessASGIServer().start()
        except Exception:  # noqa: BLE001  (the flow starts it again and reports the error)
            return

    thread = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    thread.start()
    return thread


def _preimport_models() -> None:
    """The libraries the efficiency, transfer and quality stages import anyway (seconds of CPU each);
    importing them while the server starts overlaps the two on a small machine."""
    import importlib

    for name in ("torch", "transformers", "sentence_transformers"):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
