"""`legival run SPEC.yaml`: the whole benchmark flow (Prefect + Ray), computing only what is missing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app
from legival.console import emit_summary, out_console
from legival.flow_command import exit_if_stages_failed, run_flow
from legival.paths import Role
from legival.preflight import discard_if_unused, prepare_spec_run


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML); see examples/demo.yaml."), Role.INPUT],
    db: Annotated[Path | None, typer.Option("--db", help="DuckDB store (overrides the spec's `store`)."), Role.STORE] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Report directory (overrides `report.out`)."), Role.OUTPUT_DIR] = None,
    teacher: Annotated[list[str] | None, typer.Option(
        "--teacher", help="Only ingest and roll out this teacher (repeatable); aggregates cover all.")] = None,
    progress_file: Annotated[Path | None, typer.Option(
        "--progress-file", help="Append JSON progress lines here (readable while the store is locked)."), Role.OUTPUT_FILE] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only plan: print what the run would compute and cost (`legival plan`), store untouched.")] = False,
) -> None:
    """Run the benchmark spec: ingest or generate teacher traces, efficiency, transfer on Ray, judge, quality, reports."""
    if dry_run:
        from legival.commands.plan import print_plan

        print_plan(spec, db, teacher or None, "run --dry-run")
        return
    t0 = time.perf_counter()
    _, db_path = prepare_spec_run(spec, db, teacher or None, out=out, check_out=True, hold=True)
    if progress_file is not None:
        os.environ["LEGIVAL_PROGRESS_FILE"] = str(progress_file.resolve())

    try:
        summary = run_flow("benchmark", lambda flow: flow(spec=str(spec.resolve()), db=str(db_path),
                                                          out=str(out.resolve()) if out else None,
                                                          teachers=teacher or None),
                           f"legival run {spec}", ["run", str(spec), "--db", str(db_path)], db=str(db_path))
    except SystemExit as e:
        if e.code == 2:  # refused (a known condition before anything was stored): leave nothing behind
            discard_if_unused(db_path)
        raise
    out_console.print(f"report: {summary['out']}", markup=False, highlight=False)
    out_console.print(f"dashboard: {summary.get('dashboard') or '(not built)'}", markup=False, highlight=False)
    if summary.get("run_id"):
        out_console.print(f"run record #{summary['run_seq']} {summary['run_id']} (`legival runs`, `legival diff`): "
                          f"{summary.get('changes')}", markup=False, highlight=False, soft_wrap=True)
    summary.pop("efficiency", None)
    summary.update({"command": "run", "flow_wall_s": summary.pop("wall_s"),
                    "wall_s": round(time.perf_counter() - t0, 3)})
    emit_summary(summary)
    exit_if_stages_failed(summary)
