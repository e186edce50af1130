"""`legival study grade`: grade the human studies' answers with their dataset's grader (the `study`
stage, docs/study.md "Analysis"). A command of the `study` group, added from its own module."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from legival.app import DbOption, open_store
from legival.commands.study import study_app
from legival.console import emit_summary, fail, progress_bar


@study_app.command("grade")
def grade(
    db: DbOption,
    name: Annotated[str | None, typer.Option(
        "--name", help="Grade this study's answers only (default: every study's).")] = None,
) -> None:
    """Grade every answer without a grade by its dataset's current grader (new answers, or a grader
    version bump); the report then shows the `human` student. Cheap: a run does it after `grade`."""
    from legival_core.stages.study import grade_studies
    from legival_core.store import study as study_rows

    t0 = time.perf_counter()
    with open_store(db) as store:
        names = study_rows.study_names(store)
        if name is not None and name not in names:
            fail(f"--name: no study {name!r} in {db} (stored: {', '.join(names) or 'none'}; "
                 "create one with `legival study create`)")
        with progress_bar("study grade") as bar:
            s = grade_studies(store, progress=lambda done, total: bar.update(done=done, total=total), study=name)
    emit_summary({"command": "study grade", "db": str(db), **s.as_dict(), "wall_s": round(time.perf_counter() - t0, 3)})
