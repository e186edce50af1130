"""`legival study export` and `legival study import`: a study run in Label Studio (docs/study.md
"Label Studio"). Commands of the `study` group, added from their own module."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from legival.app import DbOption, open_store
from legival.commands.study import study_app
from legival.console import emit_summary, err_console, fail, out_console
from legival.paths import Role

if TYPE_CHECKING:
    from legival_core.store.db import Store


def _study_key(store: Store, db: Path, name: str) -> bytes:
    """The study's key (item keys derive from it), or exit with the reason."""
    from legival_core.store.study import study_names
    from legival_core.study.links import KeyFileError, study_key

    known = study_names(store)
    if name not in known:
        fail(f"--name: no study {name!r} in {db} (studies: {', '.join(known) or 'none'}; "
             "`legival study create` designs one)")
    try:
        return study_key(store, name)
    except KeyFileError as e:
        fail(str(e))


@study_app.command("export")
def export(
    db: DbOption,
    name: Annotated[str, typer.Option("--name", help="The study to export.")],
    fmt: Annotated[str, typer.Option("--format", help="The tool to export for: label-studio.")],
    out: Annotated[Path, typer.Option("--out", help="The folder to write (created; must be empty or absent)."), Role.OUTPUT_DIR],
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier export in --out (only a folder an export wrote, every file listed in its manifest).")] = False,
) -> None:
    """Write the study's items as Label Studio tasks (problem and prefix only), its labeling config, the
    design's assignment and a README into --out, all or nothing."""
    from legival_core.study.label_studio import FORMAT, LabelStudioError, export_tasks, write_export

    t0 = time.perf_counter()
    if fmt != FORMAT:
        fail(f"--format: unknown format {fmt!r} (known: {FORMAT})")
    with open_store(db, read_only=True) as store:
        key = _study_key(store, db, name)
        try:
            made = export_tasks(store, name, key)
        except LabelStudioError as e:
            fail(str(e))
    try:
        files = write_export(made, name, out, force=force)
    except FileExistsError as e:
        fail(f"--out {out}: {e.strerror or e}")
    except OSError as e:
        fail(f"--out {out}: cannot write there ({e.strerror or e})")
    for f in files:
        out_console.print(str(f), markup=False, highlight=False, soft_wrap=True)
    err_console.print(f"next: import {out / 'tasks.json'} into a Label Studio project with {out / 'config.xml'} "
                      f"(see {out / 'README.txt'})", markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "study export", "db": str(db), "study": name, "format": fmt, "out": str(out),
                  "tasks": len(made.tasks), "participants": len({r["code"] for r in made.assignments}),
                  "assignments": len(made.assignments), "files": len(files),
                  "wall_s": round(time.perf_counter() - t0, 3)})


@study_app.command("import")
def import_(
    db: DbOption,
    name: Annotated[str, typer.Option("--name", help="The study the answers belong to.")],
    file: Annotated[Path, typer.Argument(help="Label Studio's JSON export (Export > JSON) of the study's tasks."), Role.INPUT],
    annotators: Annotated[Path | None, typer.Option(
        "--annotators", help="CSV annotator,code: Label Studio e-mails or user ids -> participant codes "
                             "(default: an annotator whose e-mail, its part before the @, or id is a code)."), Role.INPUT] = None,
    any_item: Annotated[bool, typer.Option(
        "--any-item", help="Also store answers to items outside the participant's assignment (counted).")] = False,
) -> None:
    """Store the answers of a Label Studio JSON export, all or nothing: re-importing stores nothing new,
    a changed answer is a conflict, skipped (cancelled) annotations are counted and left out."""
    from legival_core.store.study_import import ImportRefused
    from legival_core.study.label_studio import LabelStudioError, import_export

    t0 = time.perf_counter()
    for label, path in (("", file), ("--annotators ", annotators)):
        if path is not None and path.is_dir():
            fail(f"{label}{path}: is a folder, not a file (give Label Studio's JSON export file)"
                 if not label else f"{label}{path}: is a folder, not a file (give the CSV annotator,code)")
        if path is not None and not path.is_file():
            fail(f"{label}{path}: no such file")
    with open_store(db) as store:
        key = _study_key(store, db, name)
        try:
            counts = import_export(store, name, key, file, annotators, any_item)
        except (LabelStudioError, ImportRefused) as e:
            fail(str(e))
        except OSError as e:
            fail(f"{file}: cannot read it ({e.strerror or e})")
    line = (f"stored {counts['stored']} answers from {counts['participants']} participants"
            if counts["stored"] else "nothing new stored")
    line += (f"; {counts['already_stored']} already stored; {counts['cancelled']} skipped (cancelled) of "
             f"{counts['annotations']} annotations in {counts['tasks']} tasks")
    if counts["outside_assignment"]:
        line += f"; {counts['outside_assignment']} outside the participant's assignment (--any-item)"
    out_console.print(line, markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "study import", "db": str(db), "study": name, "file": str(file), **counts,
                  "wall_s": round(time.perf_counter() - t0, 3)})
