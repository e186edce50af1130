"""`legival monitorability run SPEC`: the spec's hint interventions and their monitors, in this process
(docs/monitorability.md); `legival run` does the same as two stages of the flow. `legival report` then
writes monitorability.csv and the dashboard's Monitorability section."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import OptionalDbOption, open_store
from legival.commands.monitorability import monitorability_app
from legival.console import emit_summary, fail, out_console, progress_bar
from legival.paths import Role


@monitorability_app.command("run")
def run(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec with a `monitorability:` section."), Role.INPUT],
    db: OptionalDbOption = None,
) -> None:
    """Sample every generating teacher without and with each cue (towards a seeded wrong target), then
    ask every monitor about every sample; computes only what is not stored."""
    from legival_core.run_config import SpecError, load_spec
    from legival_core.stages.base import run_stage, store_access
    from legival_core.stages.hint_monitor import HintMonitorStage
    from legival_core.stages.interventions import chosen_teachers, run_interventions

    t0 = time.perf_counter()
    try:
        s = load_spec(spec)
    except SpecError as e:
        fail(str(e))
    if not s.monitorability.enabled:
        fail(f"{spec}: monitorability.enabled is false (set it to true to run hint interventions)")
    summary: dict[str, Any] = {"command": "monitorability run", "spec": str(spec), "interventions": [], "monitors": []}
    with open_store(db or s.store, create=True) as store, progress_bar("interventions") as bar:
        access = store_access(store)
        for teacher in chosen_teachers(s):
            got = run_interventions(access, s, teacher, lambda done, total: bar.update(done, total))
            summary["interventions"].append(got)
            for d in got["datasets"]:
                out_console.print(f"{teacher.name} {d['dataset']}: {d['generated']} sampled, {d['cached']} stored "
                                  f"before, {d['skipped_no_target']} problems without a target", markup=False,
                                  highlight=False, soft_wrap=True)
        for monitor in s.monitorability.monitors:
            got_m = run_stage(HintMonitorStage(monitor, s.monitorability), access, None,
                              lambda done, total: bar.update(done, total)).as_dict()
            summary["monitors"].append(got_m)
            out_console.print(f"monitor {monitor.name}: {got_m['asked']} verdicts ({got_m['cached']} stored before, "
                              f"{got_m['unparsed']} unparsed)", markup=False, highlight=False, soft_wrap=True)
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    emit_summary(summary)
