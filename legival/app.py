"""The `legival` application object and the options every command shares.

Commands live in `legival/commands/<name>.py` (one module per command or group); `legival/cli.py`
imports them all. One typer app, one error style, a progress bar on a terminal, and one line of JSON
at the end of standard output (../shared/CLI.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from legival.console import fail
from legival.paths import Role

if TYPE_CHECKING:
    from pydantic import BaseModel

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

        from legival.lifecycle.signals import terminations_raise
        from legival_core.stages.isolation import Isolation, isolation

        try:
            with terminations_raise(), \
                    isolation(Isolation(retry_failed=retry or os.environ.get("LEGIVAL_RETRY_FAILED") == "1")):
                result = super().invoke(ctx)
        except KeyboardInterrupt as k:  # SIGTERM, SIGINT, SIGHUP (legival.lifecycle.signals.Terminated), a bare Ctrl-C
            _interrupted(getattr(k, "signum", signal.SIGINT))
            raise  # unreachable: _interrupted exits
        except Exception as e:
            _interrupted()  # a signal came: whatever a library made of it, the signal's line (legival/lifecycle/signals.py)
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
    from legival.lifecycle.signals import interruption

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
        note_migration(store)
    return store


def say_waiting(line: str) -> None:
    """The one line a command prints when the store it opens is held by another process (it then waits,
    bounded: `legival_core.store.db.store_wait_s`)."""
    from legival.console import err_console

    err_console.print(f"note: {line}", markup=False, highlight=False, soft_wrap=True)


def note_migration(store: Store) -> None:
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
