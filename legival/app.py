"""The `legival` application object and the options every command shares.

Commands live in `legival/commands/<name>.py` (one module per command or group); `legival/cli.py`
imports them all. One typer app, one error style, a progress bar on a terminal, and one line of JSON
at the end of standard output (../shared/CLI.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from legival.console import fail

if TYPE_CHECKING:
    from pydantic import BaseModel

    from legival_core.spec import BenchmarkSpec
    from legival_core.store import Store

M = TypeVar("M", bound="BaseModel")


class LegivalGroup(TyperGroup):
    """The command group with the error boundary every command shares: a broken plugin or an unusable
    store is an `error:` line (exit 2), whichever command met it. Being part of the app (not of the
    console script's `main`), the same boundary holds when the app is invoked in-process."""

    def invoke(self, ctx: Any) -> Any:  # Any: typer may vendor its own click, whose Context this is
        try:
            return super().invoke(ctx)
        except Exception as e:
            from legival_core.registry import PluginError
            from legival_core.store import StoreError

            if isinstance(e, PluginError | StoreError):
                fail(str(e))
            raise


app = typer.Typer(
    cls=LegivalGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Legi-Val: how legible are the reasoning traces of reasoning models?",
    pretty_exceptions_enable=False,
)

DbOption = Annotated[Path, typer.Option("--db", help="DuckDB store file.")]


def open_store(db: Path, create: bool = False, read_only: bool = False) -> Store:
    """Open the store or exit with a readable error. Only the commands that store traces (ingest,
    generate, run) create one: anywhere else a missing store is a typo, not an empty benchmark.
    `read_only`: a command that only reads (report, serve) works on read-only media."""
    from legival_core.store import Store, StoreError

    try:
        return Store(db, read_only=read_only, create=create)
    except StoreError as e:
        fail(str(e))
        raise  # unreachable: fail exits


def settings(section: type[M], **values: Any) -> M:
    """A spec section built from command-line options (the spec holds the defaults and the checks);
    a bad value exits with an `error:` line naming the option."""
    from pydantic import ValidationError

    try:
        return section.model_validate(values, context={"check_files": False})
    except ValidationError as e:
        problems = []
        for err in e.errors(include_url=False):
            field = ".".join(str(x) for x in err["loc"]) or "options"
            problems.append(f"--{field.replace('_', '-')}: {err['msg'].removeprefix('Value error, ')}")
        fail("; ".join(problems))
        raise  # unreachable: fail exits


def prepare_spec_run(spec_file: Path, db: Path | None, teachers: list[str] | None,
                     only_generating: bool = False, create: bool = True,
                     out: Path | None = None, check_out: bool = False) -> tuple[BenchmarkSpec, Path]:
    """What every spec-driven command checks before a flow starts, exiting with a readable error:
    the spec validates, every chosen teacher that generates has its problems file (so a run fails
    before any model loads), and the store (`--db`, else the spec's) is not locked by another
    process. `only_generating`: the chosen teachers must generate (`legival generate --spec`).
    `create=False` (a dry run): the store is not created, and only checked when it exists.
    `check_out`: the report directory (`out`, else the spec's `report.out`) must be writable, checked
    before the store is created."""
    import os

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    from legival_core.spec import SpecError, load_spec
    from legival_core.store import Store, StoreError

    try:
        s = load_spec(spec_file)
        if only_generating:
            chosen = s.generating_teachers(teachers)
        else:
            chosen = list(s.teachers) if not teachers else [s.teacher(n) for n in teachers]
        for t in chosen:
            if t.generate is not None:
                t.generate.jobs(s.datasets, t.name)
    except SpecError as e:
        fail(str(e))
    if check_out:
        writable_dir(out if out is not None else s.report.out, "--out" if out is not None else f"{spec_file}: report.out")
    db_path = (db or s.store).resolve()
    if not create and not db_path.exists():
        return s, db_path
    try:
        Store(db_path, read_only=not create).close()
    except StoreError as e:
        fail(str(e))
    return s, db_path


def writable_dir(path: Path, what: str) -> Path:
    """Create the output directory `path` now and check that files can be written there, so that an
    unwritable report directory fails (exit 2, naming `what`) before any work, not with a traceback
    after it."""
    import os
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".legival-write-check-", dir=path)  # a name of its own
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        fail(f"{what} {path}: cannot write there ({e.strerror or e})")
    return path

