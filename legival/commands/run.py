"""`legival run SPEC.yaml`: the whole benchmark flow (Prefect + Ray), computing only what is missing."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app, prepare_spec_run
from legival.console import emit_summary, fail, out_console, progress_bar


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML); see examples/demo.yaml.")],
    db: Annotated[Path | None, typer.Option("--db", help="DuckDB store (overrides the spec's `store`).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Report directory (overrides `report.out`).")] = None,
    teacher: Annotated[list[str] | None, typer.Option(
        "--teacher", help="Only ingest and roll out this teacher (repeatable); aggregates cover all.")] = None,
    progress_file: Annotated[Path | None, typer.Option(
        "--progress-file", help="Append JSON progress lines here (readable while the store is locked).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only plan: print what the run would compute and cost (`legival plan`), store untouched.")] = False,
) -> None:
    """Run the benchmark spec: ingest or generate teacher traces, efficiency, transfer on Ray, judge, quality, reports."""
    if dry_run:
        from legival.commands.plan import print_plan

        print_plan(spec, db, teacher or None, "run --dry-run")
        return
    t0 = time.perf_counter()
    _, db_path = prepare_spec_run(spec, db, teacher or None, out=out, check_out=True)
    if progress_file is not None:
        os.environ["LEGIVAL_PROGRESS_FILE"] = str(progress_file.resolve())

    server = _prestart_prefect_server()
    from flows.benchmark import benchmark
    from tasks.progress import BOARD

    if server is not None:
        _preimport_models()
        server.join()

    from legival.cancel import cancellable

    def stored() -> dict[str, int]:
        return {"rollouts_committed_by_this_run": BOARD.committed}

    command = f"legival run {spec}"
    with progress_bar("rollouts") as bar, cancellable(stored, command) as received:
        BOARD.add_sink(lambda done, total: bar.update(done=done, total=total))
        try:
            summary = benchmark(spec=str(spec.resolve()), db=str(db_path),
                                out=str(out.resolve()) if out else None, teachers=teacher or None)
        except BaseException as e:
            if received:  # cancelled: the flow stopped at a batch boundary (or Prefect's SIGTERM bridge)
                received.leave()
            if not isinstance(e, Exception):
                raise
            from legival.crash import failure  # the flow failed: one line, the traceback in a crash log

            fail(*failure(e, ["run", str(spec), "--db", str(db_path)], "benchmark"))
        finally:
            if not received:
                BOARD.clear()
        if received:  # the signal came as the flow ended: it is complete, say so and exit as cancelled
            received.leave(why="after the run completed")
    out_console.print(f"report: {summary['out']}", markup=False, highlight=False)
    out_console.print(f"dashboard: {summary['dashboard'] or '(not built)'}", markup=False, highlight=False)
    if summary.get("run_id"):
        out_console.print(f"run record #{summary['run_seq']} {summary['run_id']} (`legival runs`, `legival diff`): "
                          f"{summary.get('changes')}", markup=False, highlight=False, soft_wrap=True)
    summary.pop("efficiency", None)
    summary.update({"command": "run", "flow_wall_s": summary.pop("wall_s"),
                    "wall_s": round(time.perf_counter() - t0, 3)})
    emit_summary(summary)


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
