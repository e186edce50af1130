"""`legival monitor`: the monitorability validation with a weak supervisor model (issue 7)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, fail, progress_bar
from legival.paths import Role
from legival.preflight import writable_dir
from legival_core.monitor.supervisor import MAX_NEW_TOKENS
from legival_core.run_config import Student, default_of

DEFAULT_MODEL: str = default_of(Student, "model")


@app.command()
def monitor(
    db: DbOption,
    supervisor: Annotated[str, typer.Option(help="Supervisor name (its verdicts are stored under it).")],
    backend: Annotated[str, typer.Option(help="A registered backend (`legival list backends`).")] = default_of(Student, "backend"),
    model: Annotated[str, typer.Option(help="Model id or local path.")] = DEFAULT_MODEL,
    limit: Annotated[int | None, typer.Option(help="First N clean and N natural traces per (teacher, dataset).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the error injection.")] = 0,
    max_new_tokens: Annotated[int, typer.Option(help="Token budget of a verdict.")] = MAX_NEW_TOKENS,
    backend_options: Annotated[str, typer.Option(help="JSON object of extra backend options.")] = "{}",
    out: Annotated[Path | None, typer.Option(help="Write monitor_metrics.csv and monitor_correlations.csv here."), Role.OUTPUT_DIR] = None,
) -> None:
    """Ask a weak supervisor whether clean, sabotaged and naturally wrong traces are correct."""
    from legival_core import untrusted_json
    from legival_core.backends.base import make_backend
    from legival_core.backends.lazy import LazyBackend
    from legival_core.registry import UnknownName, canonical_name
    from legival_core.reports.compute.monitoring import monitor_report
    from legival_core.safe_csv import write_csv
    from legival_core.stages.monitor import run_monitor

    try:
        options: dict[str, Any] = untrusted_json.loads(backend_options)  # JsonRefused: a JSONDecodeError
        name = canonical_name("backend", backend)
    except json.JSONDecodeError as e:
        fail(f"--backend-options is not valid JSON: {e.msg}")
    except UnknownName as e:
        fail(str(e))
    if not isinstance(options, dict):
        fail("--backend-options must be a JSON object")
    # A model named in --backend-options is not overridden by the default --model.
    chosen: str | None = None if model == DEFAULT_MODEL and {"model", "model_dir"} & options.keys() else model
    if out is not None:
        writable_dir(out, "--out")
    t0 = time.perf_counter()
    engine = LazyBackend(lambda: make_backend(name, chosen, None, options))
    try:
        with open_store(db) as store:
            with progress_bar(f"monitor ({supervisor})") as bar:
                s = run_monitor(store, engine, supervisor, seed=seed, limit=limit, max_new_tokens=max_new_tokens,
                                progress=lambda done, total: bar.update(done=done, total=total))
            metrics, corr = monitor_report(store, supervisor)
    finally:
        engine.close()
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_csv(metrics, out / "monitor_metrics.csv")
            write_csv(corr, out / "monitor_correlations.csv")
        except OSError as e:  # verdicts are stored: only the CSV files are missing
            fail(f"--out {out}: cannot write the CSV files ({e.strerror or e}); the verdicts are stored")
    pooled = {r["teacher"]: {k: r[k] for k in ("precision", "recall", "f1")}
              for r in metrics.filter((metrics["dataset"] == "all") & (metrics["condition"] == "all")).iter_rows(named=True)}
    emit_summary({"command": "monitor", **s.as_dict(), "per_teacher": pooled,
                  "wall_s": round(time.perf_counter() - t0, 3)})
