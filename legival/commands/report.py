"""`legival report`."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, fail, out_console
from legival.paths import Role
from legival.preflight import writable_dir
from legival_core.run_config import Efficiency, Report, Transfer, default_of


@app.command()
def report(
    db: DbOption,
    out: Annotated[Path, typer.Option("--out", help="Report directory."), Role.OUTPUT_DIR],
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = default_of(Efficiency, "tau"),
    model: Annotated[str, typer.Option(help="Embedding model of the redundancy rows.")] = default_of(Efficiency, "model"),
    n_bins: Annotated[int, typer.Option(help="Bins B the rollouts were planned with.")] = default_of(Transfer, "n_bins"),
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples over problems (0 = no intervals).")] = default_of(
        Report, "resamples"),
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = default_of(Report, "seed"),
    dashboard_traces: Annotated[
        int, typer.Option(help="Traces per (teacher, dataset) embedded in index.html's trace browser.")
    ] = default_of(Report, "dashboard_traces"),
    wide: Annotated[bool, typer.Option("--wide", help="Print every column of the table, not the compact view.")] = False,
) -> None:
    """Build the reports from the store alone (no model call)."""
    from legival_core.outputs import refuse_foreign
    from legival_core.reports.stage import ReportConfig, build_reports

    rep = settings(Report, resamples=resamples, seed=seed, dashboard_traces=dashboard_traces)
    config = ReportConfig(settings(Efficiency, tau=tau, model=model), settings(Transfer, n_bins=n_bins).n_bins,
                          rep.resamples, rep.seed, rep.dashboard_traces)
    t0 = time.perf_counter()
    with open_store(db, read_only=True) as store:
        if store.count("traces") == 0:  # e.g. the first ingest was refused: no teacher, nothing to rank
            fail(f"{db}: no traces stored yet, nothing to report (store some with `legival ingest FILE --db {db}` "
                 f"or `legival run SPEC --db {db}`)")
        existed = out.exists()
        writable_dir(out, "--out")
        try:
            refuse_foreign(out)  # before any work: the report replaces its directory whole (docs/reports.md)
            result = build_reports(store, out, config)
        except OSError as e:  # a file that cannot be written (disk full), DIR not a report: DIR left as it was
            if not existed:
                with contextlib.suppress(OSError):
                    out.rmdir()  # the empty directory `writable_dir` made
            fail(f"--out {out}: cannot write the report ({e.strerror or e})")
    from legival.tables import literal, print_report_table
    from legival_core.reports.compute.coverage import summary_line

    data = result.data
    if result.teacher_dataset is not None:
        print_report_table(result.teacher_dataset, data.teacher_metrics if data is not None else None, wide)
    if data is not None and data.coverage is not None:
        out_console.print(literal(summary_line(data.coverage)), highlight=False, soft_wrap=True)
    summary: dict[str, object] = {"command": "report", "out": str(out), "files": sorted(result.files),
                                  "wall_s": round(time.perf_counter() - t0, 3)}
    if result.data is not None:
        tm = result.data.teacher_metrics
        summary.update(teachers=tm.height, resamples=resamples,
                       pareto_frontier=sorted(tm.filter(tm["on_pareto_frontier"].fill_null(False))["teacher"].to_list()))
    emit_summary(summary)
