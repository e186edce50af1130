"""`legival transfer`: student rollouts on teacher-trace prefixes (SPEC section 4)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, fail, progress_bar
from legival_core.run_config import Execution, Student, Transfer, default_of


@app.command()
def transfer(
    db: DbOption,
    student: Annotated[str, typer.Option(help="Student name (recorded with its rollouts).")] = default_of(Student, "name"),
    backend: Annotated[str, typer.Option(help="A registered backend (`legival list backends`).")] = default_of(
        Student, "backend"),
    model: Annotated[str, typer.Option(help="Model id or local path (default: the shipped SmolLM2).")] = default_of(
        Student, "model"),
    teacher: Annotated[str | None, typer.Option(help="Only this teacher's traces.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Only this dataset.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N transfer traces per (teacher, dataset), stable order.")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Token budget of each continuation (SPEC: 1024).")] = default_of(
        Transfer, "max_new_tokens"),
    step_interval: Annotated[int, typer.Option(help="s in K = {0, s, 2s, ..., m}.")] = default_of(Transfer, "step_interval"),
    n_bins: Annotated[int, typer.Option(help="Bins B of the prefix fraction k/m.")] = default_of(Transfer, "n_bins"),
    profile: Annotated[str, typer.Option(help="spec (default) or preprint (the released paper code's choices).")] = (
        default_of(Transfer, "profile")),
    dtype: Annotated[str, typer.Option(help="Numeric precision (part of the student key).")] = default_of(Student, "dtype"),
    traces_per_chunk: Annotated[int, typer.Option(help="Traces per backend call and per commit.")] = default_of(
        Execution, "traces_per_chunk"),
    backend_options: Annotated[str, typer.Option(help="JSON object of extra backend options, e.g. '{\"base_url\": ...}'.")] = "{}",
    mode: Annotated[str, typer.Option(help="continue (default) or early_answer: the answer forced right after each "
                                           "prefix (Lanham et al. 2023; rows in early_answers, docs/transfer.md).")] = (
        default_of(Student, "mode")),
) -> None:
    """Roll out a student on prefixes of correct teacher traces; computes only what is missing."""
    from datetime import UTC, datetime

    from legival_core import untrusted_json
    from legival_core.runs.record import new_run_id
    from legival_core.stages.transfer import run_transfer
    from legival_core.stages.transfer_timing import Timing

    try:
        options = untrusted_json.loads(backend_options)  # JsonRefused: a JSONDecodeError
    except json.JSONDecodeError as e:
        fail(f"--backend-options is not valid JSON: {e.msg}")
    if not isinstance(options, dict):
        fail("--backend-options must be a JSON object")
    t = settings(Transfer, max_new_tokens=max_new_tokens, step_interval=step_interval, n_bins=n_bins,
                 profile=profile)
    config = settings(Student, name=student, backend=backend, model=model, dtype=dtype,
                      backend_options=options, mode=mode).config(t)
    t0 = time.perf_counter()
    # its batches' timings calibrate `legival plan` (an accelerator named by the engine: cpu, else unnamed)
    timing = Timing(f"transfer-{new_run_id(datetime.now(UTC))}", "transfer", "") if config.mode == "continue" else None
    with open_store(db) as store, progress_bar(f"transfer ({student})") as bar:
        s = run_transfer(store, None, config, teacher=teacher, dataset=dataset, limit=limit,
                         traces_per_chunk=traces_per_chunk,
                         progress=lambda done, total: bar.update(done=done, total=total), timing=timing)
    emit_summary({"command": "transfer", "student": student, "student_key": config.student_key,
                  **s.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)})
