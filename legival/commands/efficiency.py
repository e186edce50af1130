"""`legival efficiency`."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, progress_bar
from legival_core.run_config import Efficiency, default_of


@app.command()
def efficiency(
    db: DbOption,
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = default_of(Efficiency, "tau"),
    model: Annotated[str, typer.Option(help="Sentence-embedding model id or local path.")] = default_of(
        Efficiency, "model"),
) -> None:
    """Token/step length, embedding redundancy and lexical backtracking for traces that lack them."""
    from legival_core.stages.efficiency import compute_efficiency

    config = settings(Efficiency, tau=tau, model=model)
    t0 = time.perf_counter()
    with open_store(db) as store, progress_bar("efficiency") as bar:
        s = compute_efficiency(store, config,
                               progress=lambda done, total: bar.update(done=done, total=total))
    wall = time.perf_counter() - t0
    summary = {"command": "efficiency", **s.as_dict(), "wall_s": round(wall, 3)}
    if s.embed_seconds > 0:
        summary["sentences_per_s"] = round(s.embedded_sentences / s.embed_seconds, 1)
    emit_summary(summary)
