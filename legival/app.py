"""The `legival` application object and the options every command shares.

Commands live in `legival/commands/<name>.py` (one module per command or group); `legival/cli.py`
imports them all. One typer app, one error style, a progress bar on a terminal, and one line of JSON
at the end of standard output (../shared/CLI.md).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from legival.console import fail
from legival.paths import Role

if TYPE_CHECKING:
    from pydantic import BaseModel

    from legival_core.spec import BenchmarkSpec
    from legival_core.store import Store

M = TypeVar("M", bound="BaseModel")


class LegivalGroup(TyperGroup):
    """The command group with the error boundary every command shares (legival/crash.py): a known
    condition (a broken plugin, an unusable store, a bad spec or trace file, an outside service's
    refusal: `legival_core.stages.conditions`) is an `error:` line (exit 2), a condition of the
    machine (port in use, disk full, permission denied) its own `error:` line (exit 2), anything else one `error:` line with
    the path of its crash log (exit 1); never a traceback. Being part of the app (not of the console
    script's `main`), the same boundary holds when the app is invoked in-process."""

    def invoke(self, ctx: Any) -> Any:  # Any: typer may vendor its own click, whose Context this is
        args = [str(a) for a in (*getattr(ctx, "_protected_args", getattr(ctx, "protected_args", [])), *ctx.args)]
        retry = RETRY_FAILED in ctx.args
        if retry:  # every command that runs stages takes it (legival_core/stages/isolation.py)
            ctx.args = [a for a in ctx.args if a != RETRY_FAILED]
        import signal

        from legival.signals import terminations_raise
        from legival_core.stages.isolation import Isolation, isolation

        try:
            with terminations_raise(), \
                    isolation(Isolation(retry_failed=retry or os.environ.get("LEGIVAL_RETRY_FAILED") == "1")):
                result = super().invoke(ctx)
        except KeyboardInterrupt as k:  # SIGTERM, SIGINT, SIGHUP (legival.signals.Terminated), a bare Ctrl-C
            _interrupted(getattr(k, "signum", signal.SIGINT))
            raise  # unreachable: _interrupted exits
        except Exception as e:
            _interrupted()  # a signal came: whatever a library made of it, the signal's line (legival/signals.py)
            if type(e).__module__.split(".")[0] in ("click", "typer"):
                raise  # usage errors, --help, typer.Exit: click prints and exits as usual
            if _broken_pipe(e) and stdout_gone():
                quiet_broken_pipe()
            from legival.crash import known

            line = known(e)  # a bad input or an outside service's refusal: its own words, no crash log
            if line is not None:
                fail(line)
            from legival_core.crashlog import crash_message

            message, code = crash_message(e, args)
            fail(message, code=code)
        except BaseException:  # SystemExit, or an exception group holding a signal's exception
            _interrupted()
            raise
        _interrupted()  # a signal a library swallowed: the command did not end as it would have
        return result


def _interrupted(signum: int | None = None) -> None:
    """Exit 128 + the signal with its one line when a signal ended the command (the first one
    received, else `signum`: an interrupt that reached the boundary); nothing when none did."""
    from legival.signals import interruption

    signalled = interruption(signum)
    if signalled is not None:
        fail(*signalled)


def _broken_pipe(e: BaseException | None) -> bool:
    """A BrokenPipeError, or one a library wrapped."""
    while e is not None:
        if isinstance(e, BrokenPipeError):
            return True
        e = e.__cause__ or e.__context__
    return False


def stdout_gone() -> bool:
    """Standard output is a pipe whose reader has gone (poll reports an error on it): a BrokenPipeError
    from anything else (an engine's pipe, a socket) is a failure like any other."""
    import select
    import sys

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured), no poll (Windows)
        return False


def quiet_broken_pipe() -> None:
    """The reader of standard output went away (`legival list | head -1`): stop quietly, as Unix
    tools do, with no error line and no crash log; standard output goes to /dev/null so that the
    interpreter's final flush does not fail again (exit 1, Python's advice for SIGPIPE)."""
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(1)


RETRY_FAILED = "--retry-failed"
"""Accepted by every command: compute again the units stored as failed (else a rerun skips them)."""

app = typer.Typer(
    cls=LegivalGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Legi-Val: how legible are the reasoning traces of reasoning models? Every command that computes "
         "takes --retry-failed: units that failed alone (stored with their reason) are computed again.",
    pretty_exceptions_enable=False,
)

DbOption = Annotated[Path, typer.Option("--db", help="DuckDB store file."), Role.STORE]
"""The store every command takes; a `Path` parameter names its role (`legival.paths`)."""
OptionalDbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB store (overrides the spec's `store`)."),
                             Role.STORE]


def open_store(db: Path, create: bool = False, read_only: bool = False, note: bool = True) -> Store:
    """Open the store or exit with a readable error. Only the commands that store traces (ingest,
    generate, run) create one: anywhere else a missing store is a typo, not an empty benchmark.
    `read_only`: a command that only reads (report, serve) works on read-only media. A store of an
    older schema is migrated by a writable open (`note`: say so on standard error), refused by a
    read-only one; a newer one is refused (legival_core/store/migrations.py)."""
    from legival_core.store import Store, StoreError

    try:
        store = Store(db, read_only=read_only, create=create, on_wait=say_waiting)
    except StoreError as e:
        fail(str(e))
        raise  # unreachable: fail exits
    if note:
        _note_migration(store)
    return store


def say_waiting(line: str) -> None:
    """The one line a command prints when the store it opens is held by another process (it then waits,
    bounded: `legival_core.store.db.store_wait_s`)."""
    from legival.console import err_console

    err_console.print(f"note: {line}", markup=False, highlight=False, soft_wrap=True)


def _note_migration(store: Store) -> None:
    if store.migrated_from is not None:
        from legival.console import err_console
        from legival_core.store import SCHEMA_VERSION

        err_console.print(f"note: {store.path}: migrated the store from schema {store.migrated_from} to "
                          f"{SCHEMA_VERSION}", markup=False, highlight=False, soft_wrap=True)


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
                     out: Path | None = None, check_out: bool = False, hold: bool = False) -> tuple[BenchmarkSpec, Path]:
    """What every spec-driven command checks before a flow starts, exiting with a readable error:
    the spec validates, every chosen teacher that generates has its problems file (so a run fails
    before any model loads), and the store (`--db`, else the spec's) is not locked by another
    process. `only_generating`: the chosen teachers must generate (`legival generate --spec`).
    `create=False` (a dry run): the store is not created, and only checked when it exists.
    `check_out`: the report directory (`out`, else the spec's `report.out`) must be writable, checked
    before the store is created. A run (`create`) also checks, before the store is created, that the
    spec's Ray cluster and the Prefect API answer within `execution.connect_timeout_s` (tasks/infra.py).
    `hold` (a run): the store stays open, handed to the flow's driver (`tasks._driver.adopt`), so no
    other process can take it between this check and the flow's first task. Nothing is left behind by
    a refusal here: the report directory is only probed (removed again when it did not exist)."""
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
    db_path = (db or s.store).resolve()
    if check_out:
        report_out = out if out is not None else s.report.out
        what = "--out" if out is not None else f"{spec_file}: report.out"
        _check_report_out(report_out, what, db_path, spec_file)
        writable_dir(report_out, what, keep=False)
    if create:
        check_infrastructure(s, spec_file)
    if not create and not db_path.exists():
        return s, db_path
    existed = db_path.exists()
    try:
        store = Store(db_path, read_only=not create, on_wait=say_waiting)
    except StoreError as e:
        fail(str(e))
    if not existed:
        _CREATED.add(db_path)
    _note_migration(store)
    if hold and create:
        from tasks._driver import adopt

        adopt(store)
    else:
        store.close()
    return s, db_path


def _check_report_out(out: Path, what: str, db_path: Path, spec_file: Path) -> None:
    """A run's report folder (`--out` or the spec's `report.out`) is checked before the run starts, as
    every command's outputs are (`legival.paths`): not the store's files or the spec, not holding them,
    and only ever an earlier report (it is replaced whole at the end of the run)."""
    from legival_core.outputs import OutputRefused, Protected, check_output, protected_store, refuse_foreign

    try:
        check_output(out, what, [*protected_store(db_path), Protected(spec_file, "the spec")], folder=True)
        refuse_foreign(out)
    except OutputRefused as e:
        fail(str(e))
    except FileExistsError as e:
        fail(f"{what} {out}: {e.strerror}")


_CREATED: set[Path] = set()
"""Stores this process created (`prepare_spec_run`): `discard_if_unused` may remove them again."""


def discard_if_unused(db_path: Path, created: bool | None = None) -> None:
    """A command refused after it created its store (a trace file gone, a second run holding it, a bad
    first file) leaves no store behind: remove the file when this process created it (`created`, else
    what `prepare_spec_run` recorded) and nothing was stored in it. A store that holds anything, or
    that existed before, is never touched."""
    from legival_core.store import Store, StoreError

    if not (created if created is not None else db_path in _CREATED) or not db_path.exists():
        return
    try:
        with Store(db_path, read_only=True) as store:
            if store.holds_data():
                return
    except StoreError:
        return
    from legival_core.outputs import sidecar

    for p in (db_path, sidecar(db_path, "wal")):
        with contextlib.suppress(OSError):
            p.unlink()
    _CREATED.discard(db_path)


def check_infrastructure(s: BenchmarkSpec, spec_file: Path) -> None:
    """Exit with one `error:` line naming the address when the spec's Ray cluster (a `ray_address`
    other than local) or the Prefect API (PREFECT_API_URL) does not answer within the spec's
    `execution.connect_timeout_s`, instead of a flow that waits minutes and dies with tracebacks."""
    from tasks.infra import Unreachable, check_prefect, check_ray

    timeout = s.execution.connect_timeout_s
    try:
        check_ray(s.execution.ray_address, timeout, str(spec_file))
        check_prefect(timeout, str(spec_file))
    except Unreachable as e:
        fail(str(e))


def writable_dir(path: Path, what: str, keep: bool = True) -> Path:
    """Create the output directory `path` now and check that files can be written there, so that an
    unwritable report directory fails (exit 2, naming `what`) before any work, not with a traceback
    after it. `keep=False`: the directories this check created are removed again (a run that is then
    refused leaves nothing; the report creates its directory when it writes)."""
    import os
    import tempfile

    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".legival-write-check-", dir=path)  # a name of its own
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        fail(f"{what} {path}: cannot write there ({e.strerror or e})")
    finally:
        if not keep:
            for p in made:  # deepest first
                with contextlib.suppress(OSError):
                    p.rmdir()
    return path

