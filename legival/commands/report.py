"""`legival report`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, out_console

if TYPE_CHECKING:
    import polars as pl


@app.command()
def report(
    db: DbOption,
    out: Annotated[Path, typer.Option("--out", help="Report directory.")],
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = 0.8,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples over problems (0 = no intervals).")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    dashboard_traces: Annotated[
        int, typer.Option(help="Traces per (teacher, dataset) embedded in index.html's trace browser.")
    ] = 10,
) -> None:
    """Build the reports from the store alone (no model call)."""
    from legival_core.reports.build import build_reports
    from legival_core.reports.extras import stage_teacher_columns

    t0 = time.perf_counter()
    with open_store(db) as store:
        extra = stage_teacher_columns(store)
        result = build_reports(store, out, tau=tau, n_resamples=resamples, seed=seed,
                               dashboard_traces=dashboard_traces, extra_teacher_columns=extra.frames,
                               extra_directions=extra.directions)
    _print_table(result.teacher_dataset)
    summary: dict[str, object] = {"command": "report", "out": str(out), "files": sorted(result.files),
                                  "wall_s": round(time.perf_counter() - t0, 3)}
    if result.data is not None:
        tm = result.data.teacher_metrics
        summary.update(teachers=tm.height, resamples=resamples,
                       pareto_frontier=sorted(tm.filter(tm["on_pareto_frontier"].fill_null(False))["teacher"].to_list()))
    emit_summary(summary)


def _print_table(df: pl.DataFrame) -> None:
    from rich.table import Table

    table = Table(title="teacher x dataset", show_lines=False)
    for c in df.columns:
        table.add_column(c, overflow="fold")
    for row in df.iter_rows():
        table.add_row(*[_fmt(v) for v in row])
    out_console.print(table)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)
