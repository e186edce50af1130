"""What every flow shares: loading the spec with the CLI's overrides, and the driver session."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from legival_core.run_config import BenchmarkSpec, Execution, Teacher, load_spec

P = ParamSpec("P")
R = TypeVar("R")

_depth = 0
_depth_lock = threading.Lock()


def ends_cancelled(fn: Callable[P, R]) -> Callable[P, R]:
    """A flow body whose cancel (`Cancelled`: a signal, the Prefect UI's Cancel) ends the flow run in
    Prefect's Cancelled state, not Failed (put it under `@flow`)."""
    import functools

    @functools.wraps(fn)
    def body(*args: P.args, **kwargs: P.kwargs) -> Any:
        from legival_core.lifecycle.cancel import Cancelled

        try:
            return fn(*args, **kwargs)
        except Cancelled as e:
            from prefect.states import Cancelled as CancelledState

            return CancelledState(message=str(e))

    return body


def load_run(spec: str, db: str | None = None, out: str | None = None) -> tuple[BenchmarkSpec, str, str]:
    """The spec, the store path and the report directory (options override the spec's)."""
    s = load_spec(spec)
    return s, str(Path(db).resolve() if db else s.store), str(Path(out).resolve() if out else s.report.out)


def selected_teachers(s: BenchmarkSpec, names: list[str] | None) -> list[Teacher]:
    return list(s.teachers) if not names else [s.teacher(n) for n in names]


def run_registered(name: str, spec: str, db: str | None = None, *, teachers: list[str] | None = None,
                   out: str | None = None, enable: str | None = None) -> list[Any]:
    """The flow of one registered stage: its jobs for the spec, as tasks, in the driver session;
    their results. `enable`: the spec section to switch on first (a flow asked for by name runs even
    when the section is not enabled)."""
    from tasks.prefect_ui import tagged
    from tasks.stages import run_jobs, run_shards, stage_jobs

    s, dbp, outp = load_run(spec, db, out)
    if enable is not None:
        s = s.model_copy(update={enable: getattr(s, enable).model_copy(update={"enabled": True})})
    from legival_core.stages.registered import stage_info

    info = stage_info(name)
    jobs = stage_jobs(name, s, teachers, outp)
    chosen = selected_teachers(s, teachers)
    with driver_session(dbp, s.execution), tagged(s, [t.name for t in chosen] if teachers else None):
        if info.shards:
            return run_shards(dbp, info, jobs, s)[0]
        return run_jobs(dbp, info, jobs, s)


@contextmanager
def driver_session(db: str | None = None, execution: Execution | None = None) -> Iterator[None]:
    """The outermost flow closes the store and the engine pool (subflows share them). A failure is
    logged by the outermost flow as one line naming its crash log (the traceback, beside the store
    `db` or in the temp directory: `legival_core.crashlog`), the same file the CLI then names; a
    known condition (`legival_core.stages.conditions`) as its one line, with no crash log.
    Stages run with the spec's unit time limit (`execution.unit_timeout_s`), and the CLI's ledger of
    failed units and `--retry-failed` when a command runs the flow (a deployment run reads
    LEGIVAL_RETRY_FAILED=1)."""
    global _depth
    from legival_core.stages.isolation import Isolation, current, isolation
    from tasks.lifecycle.cancel_watch import cancel_from_api
    from tasks.ray_pool import shutdown_pools
    from tasks.store_lock import close_stores

    cur = current()
    settings = Isolation(unit_timeout_s=execution.unit_timeout_s if execution is not None else cur.unit_timeout_s,
                         retry_failed=cur.retry_failed or os.environ.get("LEGIVAL_RETRY_FAILED") == "1",
                         ledger=cur.ledger)
    with _depth_lock:
        _depth += 1
        outermost = _depth == 1
    if outermost:
        from tasks.lifecycle.processes import own_prefect_servers

        own_prefect_servers()  # started by the flow's first API call when nothing started it before
    try:
        with isolation(settings), cancel_from_api() if outermost else nullcontext():
            yield
    except Exception as e:
        if outermost:
            _log_failure(e, db)
        raise
    finally:
        with _depth_lock:
            _depth -= 1
            last = _depth == 0
        if last:
            close_stores()
            shutdown_pools()


def _log_failure(e: BaseException, db: str | None) -> None:
    from prefect import get_run_logger

    from legival_core.crashlog import summarize, write_crash_log
    from legival_core.lifecycle.cancel import Cancelled
    from legival_core.stages.conditions import known_failure, reason

    if isinstance(e, Cancelled):  # not a failure: every committed batch is stored, a rerun resumes
        with suppress(Exception):
            get_run_logger().warning(f"{e}: every committed batch is stored; rerun to resume")
        return
    known = known_failure(e)
    if known is not None:  # a bad input or an outside service's refusal: its words, no crash log
        with suppress(Exception):
            get_run_logger().error(f"failed: {reason(known)}")
        return
    log = write_crash_log(e, ["--db", db] if db else [])
    with suppress(Exception):  # outside a flow run there is no run logger; the CLI reports it anyway
        get_run_logger().error(f"failed: {summarize(e)} (details in {log})")
