"""`legival runs` (the recorded runs) and `legival diff` (what changed between two of them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, err_console, fail, out_console
from legival.paths import Role


@app.command()
def runs(db: DbOption) -> None:
    """List the runs recorded in the store (every `legival run` and deployment run records one)."""
    from legival_core.runs.diff import format_cell
    from legival_core.store import runs as run_reads

    with open_store(db, read_only=True) as store:
        frame = run_reads.runs(store)
        n_metrics = run_reads.metric_counts(store, frame["run_id"].to_list())
    rows = []
    for r in frame.iter_rows(named=True):
        counts = json.loads(r["counts"] or "{}")
        wall = (r["ended_at"] - r["started_at"]).total_seconds() if r["started_at"] and r["ended_at"] else None
        rows.append({
            "seq": r["seq"], "run_id": r["run_id"], "spec": r["spec_name"], "spec_hash": r["spec_hash"],
            "started_at": str(r["started_at"])[:19], "wall_s": round(wall, 1) if wall is not None else None,
            "teachers": json.loads(r["teachers"]) if r["teachers"] else "all",
            "new_traces": counts.get("new_traces"), "rollouts_generated": counts.get("rollouts_generated"),
            "judge_calls": counts.get("judge_calls"), "metric_rows": n_metrics.get(r["run_id"], 0),
            "flow_run_id": r["flow_run_id"], "ui_url": r["ui_url"], **_transfer_time(counts),
        })
    if not rows:
        out_console.print(f"no runs recorded in {db} (`legival run SPEC --db {db}` records one per run)",
                          markup=False, highlight=False, soft_wrap=True)
    else:
        cols = ["seq", "run_id", "spec", "started_at", "wall_s", "new_traces", "rollouts_generated", "judge_calls",
                "transfer_time_ratio", "metric_rows", "teachers"]
        _print_rows(cols, [[format_cell(r[c]) for c in cols] for r in rows])
        for r in rows:
            if r["ui_url"]:
                out_console.print(f"#{r['seq']} in Prefect: {r['ui_url']}", markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "runs", "db": str(db), "runs": rows})


def _transfer_time(counts: dict[str, Any]) -> dict[str, Any]:
    """The run's transfer time, planned and actual (`plan_vs_actual.wall_s`), and planned / actual;
    None when the run had no transfer work or no estimate."""
    wall = (counts.get("plan_vs_actual") or {}).get("wall_s") or {}
    planned, actual = wall.get("planned"), wall.get("actual")
    ratio = round(planned / actual, 2) if planned is not None and actual and counts.get("rollouts_generated") else None
    return {"transfer_planned_s": planned, "transfer_actual_s": actual, "transfer_time_ratio": ratio}


@app.command()
def diff(
    db: DbOption,
    from_run: Annotated[str | None, typer.Option("--from", help="Older run: id, id prefix or #seq (default: the one before --to).")] = None,
    to_run: Annotated[str | None, typer.Option("--to", help="Newer run: id, id prefix or #seq (default: the last run).")] = None,
    fail_on: Annotated[list[str] | None, typer.Option(
        "--fail-on", help="METRIC:DELTA -- exit 1 when a teacher's METRIC got worse by more than DELTA (repeatable).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the diff as CSV here (the report's diff.csv schema)."), Role.OUTPUT_FILE] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Rows printed (every row goes to --out).")] = 30,
) -> None:
    """What changed between two recorded runs: values, deltas against the bootstrap noise, ranks, causes."""
    from legival.tables import literal
    from legival_core.runs.diff import (
        RunNotFound,
        changes,
        format_cell,
        headline,
        parse_fail_on,
        regressions,
        unmatched_rules,
    )
    from legival_core.safe_csv import write_csv

    t0 = time.perf_counter()
    try:
        rules = [parse_fail_on(text) for text in (fail_on or [])]
    except ValueError as e:
        fail(str(e))
        raise
    with open_store(db, read_only=True) as store:
        try:
            ch = changes(store, from_run, to_run)
        except RunNotFound as e:
            fail(str(e))
            raise
    out_console.print(literal(headline(ch)), highlight=False, soft_wrap=True)
    frame = ch.frame
    if frame.height:
        cols = ["teacher", "dataset", "metric", "change", "old", "new", "delta", "outside_ci", "rank_old", "rank_new",
                "cause"]
        _print_rows(cols, [[format_cell(v) for v in row] for row in frame.select(cols).head(limit).iter_rows()])
        if frame.height > limit:
            more = "; every row: --out FILE" if out is None else ""
            out_console.print(f"... {frame.height - limit} more rows{more}", markup=False, highlight=False)
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_csv(frame, out)
        except OSError as e:
            fail(f"--out {out}: cannot write there ({e.strerror or e})")
    bad = regressions(frame, rules)
    for line in bad:
        out_console.print(literal(f"regression: {line}"), highlight=False, soft_wrap=True)
    unmatched = unmatched_rules(ch, rules) if ch.old is not None else []
    for metric in unmatched:
        err_console.print(f"warning: --fail-on {metric}: no teacher has a value in the newer run; it gates nothing",
                          markup=False, highlight=False, soft_wrap=True)
    summary: dict[str, Any] = {
        "command": "diff", "db": str(db), "from": ch.old.run_id if ch.old else None,
        "to": ch.new.run_id if ch.new else None, "changes": frame.filter(~frame["change"].str.starts_with("teacher")).height,
        "outside_ci": frame.filter(frame["outside_ci"].fill_null(False)).height,
        "teachers_added": ch.teachers_added, "teachers_removed": ch.teachers_removed,
        "regressions": bad, "fail_on_unmatched": unmatched, "note": ch.note, "out": str(out) if out else None,
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    emit_summary(summary)
    if bad:
        raise typer.Exit(1)


def _print_rows(cols: list[str], body: list[list[str]]) -> None:
    """Aligned plain text: one line per row in any terminal or pipe (the last column unpadded); a name
    prints as typed (`legival.tables.literal`)."""
    from rich.cells import cell_len

    from legival.tables import literal, visible

    body = [[visible(c) for c in r] for r in body]
    width = [max(cell_len(c), *(cell_len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(cols)]
    for cells in (cols, *body):
        line = "  ".join(c + " " * (width[i] - cell_len(c)) for i, c in enumerate(cells)).rstrip()
        out_console.print(literal(line), highlight=False, soft_wrap=True)
