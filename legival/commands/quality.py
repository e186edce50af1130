"""`legival quality`."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from legival.app import DbOption, app, fail, open_store
from legival.console import emit_summary, progress_bar
from legival_core.quality.group import QualityConfig

DEFAULTS = QualityConfig()
"""The quality stage's defaults (one source: the CLI only overrides them)."""


@app.command()
def quality(
    db: DbOption,
    metrics: Annotated[str | None, typer.Option(
        help="Comma-separated quality groups or metric names (default: all; `legival list quality` lists "
             "them).")] = None,
    embed_model: Annotated[str, typer.Option(help="Sentence-embedding model for cohesion.")] = DEFAULTS.embed_model,
    nli_model: Annotated[str | None, typer.Option(help="MNLI model id or local directory.")] = None,
    ppl_model: Annotated[str | None, typer.Option(
        help=f"Causal LM for perplexity (default: the embedded {DEFAULTS.ppl_model}).")] = None,
) -> None:
    """gCoT text-quality metrics (clarity, cohesion, consistency, fluency, informativeness, Z3) for traces that
    lack them; metrics whose model is not installed are stored as 'unavailable'."""
    from dataclasses import replace

    from legival_core.quality.group import resolve_groups
    from legival_core.stages.quality import compute_quality

    names = [m for m in (metrics or "").split(",") if m.strip()]
    try:
        resolve_groups(names)
    except ValueError as e:
        fail(str(e))
    cfg = replace(DEFAULTS, embed_model=embed_model)
    if nli_model:
        cfg = replace(cfg, nli_model=nli_model)
    if ppl_model:
        cfg = replace(cfg, ppl_model=ppl_model)
    t0 = time.perf_counter()
    with open_store(db) as store, progress_bar("quality") as bar:
        s = compute_quality(store, names or None, cfg, progress=bar.phase)
    emit_summary({"command": "quality", **s.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)})
