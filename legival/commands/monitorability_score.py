"""`legival monitorability score`: g-mean² of a monitor on an intervention table (issue 48 parts 3 and 7,
docs/monitorability.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.commands.monitorability import monitorability_app
from legival.console import emit_summary, err_console, fail
from legival.paths import Role
from legival_core.monitor.gmean_bootstrap import DRAWS

WRITER = "legival monitorability score"
RESERVED = ("x", "y", "z")


@monitorability_app.command("score")
def score(
    table: Annotated[Path, typer.Argument(help="CSV (plain, gzip or zstd) or Parquet: an instance column, x, y, z (0/1), "
                                               "optional grouping columns."), Role.INPUT],
    out: Annotated[Path, typer.Option("--out", help="Folder written whole: per_instance.csv, summary.csv."), Role.OUTPUT_DIR],
    instance: Annotated[str, typer.Option(help="The instance column.")] = "instance",
    group: Annotated[list[str] | None, typer.Option(help="A grouping column (repeat: --group teacher --group cue "
                                                         "--group monitor).")] = None,
    bootstrap: Annotated[int, typer.Option(help="Draws of the cross-fit hierarchical bootstrap.")] = DRAWS,
    seed: Annotated[int, typer.Option(help="Seed of the splits and resamples.")] = 0,
) -> None:
    """Per instance, the plain g-mean² quantities (all rows, no split); per group, the cross-fit
    bootstrap mean and std of g-mean², TPR, TNR, effect size and the eligible fraction, with Chen et
    al.'s verbalisation rate beside them."""
    from legival_core.monitor.gmean import cell_counts, per_instance
    from legival_core.monitor.gmean_bootstrap import summary
    from legival_core.readers.intervention_table import read_intervention_table

    groups = list(group or [])
    if bootstrap < 1:
        fail(f"--bootstrap must be at least 1, not {bootstrap}")
    for name in (instance, *groups):
        if name in RESERVED:
            fail(f"--instance/--group {name!r}: x, y and z are the arm, the outcome and the flag, not keys")
    if len(set([instance, *groups])) != len(groups) + 1:
        fail(f"--instance and --group name a column twice: {', '.join([instance, *groups])}")
    t0 = time.perf_counter()
    try:
        rows = read_intervention_table(table, instance, groups)
    except ValueError as e:  # the file, or its first bad row: FILE:LINE: field 'x': ...
        fail(str(e))
    if rows.height == 0:
        fail(f"{table}: no rows (only a header, or an empty file): there is nothing to score")
    cells = cell_counts(rows, instance, groups)
    plain = per_instance(rows, instance, groups)
    groups_table = summary(cells, draws=bootstrap, seed=seed)
    missing = int(groups_table["missing_arm"].sum())
    if missing:
        err_console.print(f"warning: {missing} instance(s) miss an arm (no row with x = 0 or none with x = 1): listed "
                          "in per_instance.csv (n_x0 or n_x1 = 0), never eligible, counted in the eligible fraction "
                          "and in summary.csv's missing_arm", markup=False, highlight=False, soft_wrap=True)
    files = _write(out, plain, groups_table)
    emit_summary({"command": "monitorability score", "table": str(table), "rows": rows.height,
                  "instances": plain.height, "groups": groups_table.height, "missing_arm": missing,
                  "eligible": int(plain["eligible"].sum()), "draws": bootstrap, "seed": seed, "out": str(out),
                  "files": files, "wall_s": round(time.perf_counter() - t0, 3)})


def _write(out: Path, plain: Any, groups_table: Any) -> list[str]:
    from legival_core.outputs import replaced_whole, write_manifest
    from legival_core.safe_csv import write_csv

    files = ["per_instance.csv", "summary.csv"]
    try:
        with replaced_whole(out, WRITER) as new:
            write_csv(plain, new / files[0])
            write_csv(groups_table, new / files[1])
            write_manifest(new, files, WRITER)
    except FileExistsError as e:
        fail(f"--out {out}: {e.strerror or e}")
    except OSError as e:
        fail(f"--out {out}: cannot write there ({e.strerror or e})")
    return files
