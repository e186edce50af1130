"""`legival plan SPEC` (and `legival run --dry-run`): what a run will compute and cost, without a model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, fail, out_console
from legival.paths import Role
from legival.preflight import prepare_spec_run


@app.command()
def plan(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML); see examples/demo.yaml."), Role.INPUT],
    db: Annotated[Path | None, typer.Option("--db", help="DuckDB store (overrides the spec's `store`); only read."), Role.STORE] = None,
    teacher: Annotated[list[str] | None, typer.Option(
        "--teacher", help="Only plan this teacher's ingest and rollouts (repeatable), as `legival run --teacher`.")] = None,
) -> None:
    """Plan a run: traces, rollouts (missing vs cached), prompt and decode tokens, judge calls and cost,
    sentences to embed, wall time and GPU-hours; the store is only read (docs/orchestration.md)."""
    print_plan(spec, db, teacher or None, "plan")


def print_plan(spec_file: Path, db: Path | None, teachers: list[str] | None, command: str) -> None:
    """Build the plan on a scratch copy of the store, print its tables, end with the JSON summary."""
    from legival_core.plan.build import scratch_plan
    from legival_core.stages.ingest import IngestError

    t0 = time.perf_counter()
    s, db_path = prepare_spec_run(spec_file, db, teachers, create=False)
    try:
        p = scratch_plan(s, db_path, teachers=teachers, spec_name=str(spec_file))
    except IngestError as e:
        fail(f"{e} (the plan stops there; nothing was stored)")
        raise
    _print_tables(p)
    summary: dict[str, Any] = {"command": command, "spec": str(spec_file), "db": str(db_path), **p.totals(),
                               "plan": p.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)}
    emit_summary(summary)


def _print_tables(p: Any) -> None:
    """Two narrow tables (80 columns): the shards summed per teacher, then per (dataset, student) when
    there are several; the shard-level rows are in the JSON summary and the Prefect artifact."""
    from rich import box
    from rich.table import Table

    from legival_core.plan.render import grouped_rows, summary_lines

    groupings: list[tuple[str, ...]] = [("teacher",)]
    if len({(s.dataset, s.student) for s in p.shards}) > 1:
        groupings.append(("dataset", "student"))
    for keys in groupings:
        headers, rows = grouped_rows(p, keys)
        table = Table(title="transfer by " + " x ".join(keys), box=box.SIMPLE_HEAD, pad_edge=False)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i < len(keys) else "right", no_wrap=i >= len(keys),
                             overflow="fold")
        for n, r in enumerate(rows):
            table.add_row(*r, style="bold" if n == len(rows) - 1 else None)
        out_console.print(table)
    for line in summary_lines(p):
        out_console.print(line, markup=False, highlight=False, soft_wrap=True)
