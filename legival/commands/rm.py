"""`legival rm`: reward-model scores per trace and their correlation with transfer utility (issue 7)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, fail, progress_bar
from legival.paths import Role
from legival.preflight import writable_dir
from legival_core.reports.paper.rewards import N_BOOT
from legival_core.rewards.models import spec_default


@app.command()
def rm(
    db: DbOption,
    model: Annotated[list[str] | None, typer.Option(
        help="RM to run: a default's name, a hub id or a local dir; repeatable. Default: the three defaults.")] = None,
    kind: Annotated[str, typer.Option(
        help="scalar | prm, for --model values that are not a default's name.")] = spec_default("kind"),
    max_length: Annotated[int, typer.Option(
        help="Token limit of an RM input (longer: head of the reasoning dropped).")] = spec_default("max_length"),
    batch_size: Annotated[int, typer.Option(help="Traces per forward pass.")] = spec_default("batch_size"),
    limit: Annotated[int | None, typer.Option(help="Score at most N traces per model (trace-id order).")] = None,
    dtype: Annotated[str, typer.Option(help="bfloat16 | float32.")] = spec_default("dtype"),
    out: Annotated[Path | None, typer.Option(help="Write rm_correlations.csv here (a directory)."), Role.OUTPUT_DIR] = None,
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples for the Pearson CIs.")] = N_BOOT,
) -> None:
    """Score traces with reward models; computes only what is missing."""
    from dataclasses import replace

    from legival_core.reports.paper.rewards import rm_correlations
    from legival_core.rewards import DEFAULT_MODELS, RewardModelSpec
    from legival_core.safe_csv import write_csv
    from legival_core.stages.rewards import run_rewards

    defaults = {s.name: s for s in DEFAULT_MODELS} | {s.model: s for s in DEFAULT_MODELS}
    specs = []
    for m in model or [s.name for s in DEFAULT_MODELS]:
        base = defaults.get(m)
        if base is None:
            name = Path(m).name.lower() if Path(m).exists() else m.split("/")[-1].lower()
            base = RewardModelSpec(name, m, kind=kind, path=m if Path(m).exists() else None)  # type: ignore[arg-type]
        specs.append(replace(base, max_length=max_length, batch_size=batch_size, dtype=dtype))
    if out is not None:
        writable_dir(out, "--out")
    t0 = time.perf_counter()
    with open_store(db) as store:
        with progress_bar("rm") as bar:
            s = run_rewards(store, specs, limit=limit,
                            progress=lambda name, done, total: bar.phase(name, done, total))
        corr = rm_correlations(store, n_boot=n_boot)
        if out is not None:
            try:
                out.mkdir(parents=True, exist_ok=True)
                write_csv(corr, out / "rm_correlations.csv")
            except OSError as e:  # scores are stored: only the CSV file is missing
                fail(f"--out {out}: cannot write rm_correlations.csv ({e.strerror or e}); the scores are stored")
    emit_summary({"command": "rm", **s.as_dict(), "correlation_rows": corr.height,
                  "wall_s": round(time.perf_counter() - t0, 3)})
