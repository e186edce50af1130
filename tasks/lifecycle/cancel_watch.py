"""A cancel from the Prefect UI or API (`prefect flow-run cancel ID`) reaching a run that no Prefect
worker supervises (`legival run` on a laptop or a login node): the outermost flow polls its own flow
run's state and, once it is Cancelling or Cancelled, sends this process SIGTERM, the same cancel as a
scheduler's signal (`legival/lifecycle/cancel.py` in the CLI, Prefect's SIGTERM bridge in a deployment), so
there is one way to stop and it commits or drops the batches in flight cleanly."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

POLL_S = 1.0
"""Seconds between two reads of the flow run's state (one small API call)."""


@contextmanager
def cancel_from_api() -> Iterator[None]:
    """Within the block, watch the current flow run (none outside a flow run: nothing to watch)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run_id = getattr(getattr(ctx, "flow_run", None), "id", None)
    if run_id is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(run_id, stop), name="legival-cancel-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


def _watch(run_id: object, stop: threading.Event) -> None:
    from prefect.client.orchestration import get_client

    with suppress(Exception), get_client(sync_client=True) as client:  # an API gone quiet is no cancel
        while not stop.wait(POLL_S):
            try:
                state = client.read_flow_run(run_id).state  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - a missed poll is retried at the next one
                continue
            if state is not None and state.type.value in ("CANCELLING", "CANCELLED"):
                from legival_core.lifecycle.cancel import request_cancel

                request_cancel("cancelled from the Prefect API")
                os.kill(os.getpid(), signal.SIGTERM)
                return
