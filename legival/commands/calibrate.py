"""`legival calibrate SPEC`: roll out a short sample on the spec's engines, so that `legival plan`'s time
estimate rests on this machine's measurements (docs/orchestration.md, "Calibration")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, fail, out_console
from legival.flow_command import run_flow
from legival.paths import Role
from legival.preflight import discard_if_unused, prepare_spec_run


@app.command()
def calibrate(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML); see examples/demo.yaml."), Role.INPUT],
    db: Annotated[Path | None, typer.Option("--db", help="DuckDB store (overrides the spec's `store`)."), Role.STORE] = None,
    traces: Annotated[int, typer.Option(
        "--traces", min=1, help="Transfer traces per (teacher, dataset) in the sample (the first ones, stable order).")] = 2,
    teacher: Annotated[list[str] | None, typer.Option(
        "--teacher", help="Only this teacher's traces (repeatable); default: every teacher with trace files.")] = None,
) -> None:
    """Measure the transfer on a sample (the first --traces traces of each teacher x dataset, every
    student, on the spec's engines) and store its timings: `legival plan` then estimates time from
    them. The sample's rollouts are kept; a run reuses them."""
    from legival_core.run_config import SpecError, load_spec

    t0 = time.perf_counter()
    try:  # before the store is created (`prepare_spec_run`): a spec with nothing to sample stores nothing
        loaded = load_spec(spec)
        chosen = [loaded.teacher(n) for n in teacher] if teacher else list(loaded.teachers)
    except SpecError as e:
        fail(str(e))
    if not any(t.generate is None for t in chosen):
        fail(f"{spec}: no teacher has trace files to calibrate on (generating teachers are left out)")
    s, db_path = prepare_spec_run(spec, db, teacher or None, hold=True)
    try:
        summary = run_flow("calibrate", lambda flow: flow(spec=str(spec.resolve()), db=str(db_path), traces=traces,
                                                          teachers=teacher or None),
                           f"legival calibrate {spec}", ["calibrate", str(spec), "--db", str(db_path)], db=str(db_path))
    except SystemExit as e:
        if e.code == 2:  # refused (a known condition before anything was stored): leave nothing behind
            discard_if_unused(db_path)
        raise
    calibration = _calibration(s, db_path)
    pva = summary.get("plan_vs_actual") or {}
    wall = pva.get("wall_s") or {}
    out_console.print(f"sample: {summary['rollouts_generated']:,} rollouts generated ({summary['rollouts_cached']:,} "
                      f"cached) of {len(summary['teachers'])} teacher(s), {summary['traces_per_cell']} trace(s) per "
                      f"teacher x dataset; transfer {wall.get('actual')} s (planned before: {wall.get('planned')} s)",
                      markup=False, highlight=False, soft_wrap=True)
    if not summary["rollouts_generated"]:
        out_console.print(f"nothing new was measured: the sample's rollouts ({summary['traces_per_cell']} trace(s) per "
                          "teacher x dataset) were stored already, so the plan keeps the records it had; "
                          f"`legival calibrate {spec} --traces {summary['traces_per_cell'] + 1}` measures the next "
                          "traces", markup=False, highlight=False, soft_wrap=True)
    for student, c in calibration.items():
        out_console.print(f"{student}: {c['basis']}: {c['source']}", markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "calibrate", "spec": str(spec), "db": str(db_path), **summary,
                  "calibration": calibration, "wall_s": round(time.perf_counter() - t0, 3)})


def _calibration(spec: Any, db: Path) -> dict[str, dict[str, Any]]:
    """Per student, the rates `legival plan` now uses for its engines and where they come from."""
    from dataclasses import fields

    from legival_core.plan.throughput import ThroughputError, load_table
    from legival_core.plan.timing import engine_rates
    from legival_core.store import Store

    try:
        table = load_table()
    except ThroughputError as e:
        return {st.name: {"basis": "unavailable", "source": str(e)} for st in spec.students}
    out: dict[str, dict[str, Any]] = {}
    with Store(db, read_only=True, create=False) as store:
        for st in spec.students:
            rates = engine_rates(store, table, spec.student_config(st), spec.execution.accelerator_kind)
            if isinstance(rates, str):
                out[st.name] = {"basis": "unavailable", "source": rates}
            else:
                out[st.name] = {"basis": rates.basis, "source": rates.source,
                                "rates": {f.name: round(getattr(rates.rates, f.name), 6) for f in fields(rates.rates)}}
    return out
