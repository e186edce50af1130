"""`legival transfer`: student rollouts on teacher-trace prefixes (SPEC section 4)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, fail, progress_bar


@app.command()
def transfer(
    db: DbOption,
    student: Annotated[str, typer.Option(help="Student name (recorded with its rollouts).")] = "smollm2-135m",
    backend: Annotated[str, typer.Option(help="embedded | vllm | openai.")] = "embedded",
    model: Annotated[str | None, typer.Option(help="Model id or local path (default: the embedded SmolLM2).")] = None,
    teacher: Annotated[str | None, typer.Option(help="Only this teacher's traces.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Only this dataset.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N transfer traces per (teacher, dataset), stable order.")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Token budget of each continuation (SPEC: 1024).")] = 1024,
    step_interval: Annotated[int, typer.Option(help="s in K = {0, s, 2s, ..., m}.")] = 3,
    profile: Annotated[str, typer.Option(help="spec (default) or preprint (the released paper code's choices).")] = "spec",
    dtype: Annotated[str, typer.Option(help="float32 | bfloat16 (part of the student key).")] = "float32",
    backend_options: Annotated[str, typer.Option(help="JSON object of extra backend options, e.g. '{\"base_url\": ...}'.")] = "{}",
) -> None:
    """Roll out a student on prefixes of correct teacher traces; computes only what is missing."""
    from legival_core.backends.lazy import LazyBackend
    from legival_core.registry import UnknownName
    from legival_core.stages.transfer import run_transfer
    from legival_core.transfer.planner import DEFAULT_STUDENT_MODEL, StudentConfig
    from legival_core.transfer.students import make_student_backend

    if profile not in ("spec", "preprint"):
        fail(f"--profile must be 'spec' or 'preprint', not {profile!r}")
    try:
        options = json.loads(backend_options)
    except json.JSONDecodeError as e:
        fail(f"--backend-options is not valid JSON: {e.msg}")
    config = StudentConfig(
        name=student, backend=backend, model=model or DEFAULT_STUDENT_MODEL, dtype=dtype,
        max_new_tokens=max_new_tokens, step_interval=step_interval, profile=profile,  # type: ignore[arg-type]
        backend_options=options,
    )
    t0 = time.perf_counter()
    backend_obj = LazyBackend(lambda: make_student_backend(config))
    with open_store(db) as store:
        try:
            with progress_bar(f"transfer ({student})") as bar:
                s = run_transfer(store, backend_obj, config, teacher=teacher, dataset=dataset, limit=limit,
                                 progress=lambda done, total: bar.update(done=done, total=total))
        except UnknownName as e:
            fail(str(e))
        finally:
            backend_obj.close()
    emit_summary({"command": "transfer", "student": student, "student_key": config.student_key,
                  **s.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)})
