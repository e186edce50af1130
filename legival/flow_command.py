"""Running a flow from a command (`legival run`, `legival calibrate`): the Prefect server started early,
a progress bar over the rollouts, SIGTERM/SIGINT as a clean cancel, and a failure as one line."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from legival.console import fail, progress_bar


def run_flow(name: str, call: Callable[[Any], dict[str, Any]], command: str, argv: list[str]) -> dict[str, Any]:
    """`call(flow)` with the flow `flows.<name>.<name>`, imported while the Prefect server starts; the
    flow's summary. A cancel stops at a batch boundary and exits as cancelled; a failure exits with
    one `error:` line naming the crash log (`argv`: the command line it gives to rerun)."""
    server = _prestart_prefect_server()
    flow = getattr(importlib.import_module(f"flows.{name}"), name)
    from tasks.progress import BOARD

    if server is not None:
        _preimport_models()
        server.join()

    from legival.cancel import cancellable

    def stored() -> dict[str, int]:
        return {"rollouts_committed_by_this_run": BOARD.committed}

    with progress_bar("rollouts") as bar, cancellable(stored, command) as received:
        BOARD.add_sink(lambda done, total: bar.update(done=done, total=total))
        try:
            summary = call(flow)
        except BaseException as e:
            if received:  # cancelled: the flow stopped at a batch boundary (or Prefect's SIGTERM bridge)
                received.leave()
            if not isinstance(e, Exception):
                raise
            from legival.crash import failure  # the flow failed: one line, the traceback in a crash log

            fail(*failure(e, argv, name))
        finally:
            if not received:
                BOARD.clear()
        if received:  # the signal came as the flow ended: it is complete, say so and exit as cancelled
            received.leave(why="after the run completed")
    return summary


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
