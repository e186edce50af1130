"""Every path a command takes says what it is, and outputs are checked before the command runs.

A `Path` parameter of a command carries one `Role` in its `Annotated` metadata (`DbOption` carries
`Role.STORE`). `guard_every_command` (called by `legival/cli.py` once every command module is imported)
wraps each registered command so that, before its body runs, every output it was given is checked
against the store's files and the command's inputs (`legival_core.outputs.check_output`: an output is
never the store, its write-ahead log or key folder, nor an input; never holds one; never lies inside
one): a refusal is one `error:` line, exit 2, nothing touched. A new command gets the check by
declaring its paths' roles; tests/cli/test_outputs_guard.py walks every registered command and fails on
a `Path` parameter with no role, and runs every output parameter against the store's files.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

__all__ = ["Role", "command_infos", "guard_every_command", "path_params"]


class Role(Enum):
    """What a command does with a path it is given."""

    STORE = "the store"
    INPUT = "an input"
    OUTPUT_FILE = "an output file"
    OUTPUT_DIR = "an output folder"
    EDITED = "a file it edits in place"
    """`add-teacher`'s spec and prefect.yaml: read, then written back; never a store."""


OUTPUTS = (Role.OUTPUT_FILE, Role.OUTPUT_DIR, Role.EDITED)


def command_infos(app: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(command words, typer CommandInfo) of every command registered on `app` and its groups."""
    for info in app.registered_commands:
        yield (*prefix, info.name or info.callback.__name__.replace("_", "-")), info
    for group in app.registered_groups:
        yield from command_infos(group.typer_instance, (*prefix, group.name))


def _is_path(tp: Any) -> bool:
    if tp is Path:
        return True
    return any(_is_path(a) for a in typing.get_args(tp))


def path_params(callback: Callable[..., Any]) -> dict[str, tuple[str, Role | None]]:
    """Parameter name -> (its option as typed on the command line, its role or None) for every parameter
    of `callback` whose type holds a `Path`."""
    hints = typing.get_type_hints(callback, include_extras=True)
    out: dict[str, tuple[str, Role | None]] = {}
    for name, hint in hints.items():
        if name == "return" or typing.get_origin(hint) is not typing.Annotated:
            if name != "return" and _is_path(hint):
                out[name] = (f"--{name.replace('_', '-')}", None)
            continue
        base, *meta = typing.get_args(hint)
        if not _is_path(base):
            continue
        roles = [m for m in meta if isinstance(m, Role)]
        decls = next(([m.default, *(m.param_decls or ())] for m in meta if hasattr(m, "param_decls")), [])
        is_argument = any(type(m).__name__ == "ArgumentInfo" for m in meta)
        option = name.upper() if is_argument else next((d for d in decls if isinstance(d, str) and d.startswith("--")),
                                                       f"--{name.replace('_', '-')}")
        out[name] = (option, roles[0] if len(roles) == 1 else None)
    return out


def _paths(value: Any) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [Path(v) for v in value if v is not None]
    return [Path(value)]


def check_paths(params: dict[str, tuple[str, Role | None]], values: dict[str, Any]) -> None:
    """Exit 2 with one `error:` line when an output given to the command is, holds or lies inside the
    store's files or one of its inputs (module docstring)."""
    from legival.console import fail
    from legival_core.outputs import OutputRefused, Protected, check_output, protected_store

    protected: list[Protected] = []
    for name, (_option, role) in params.items():
        for p in _paths(values.get(name)):
            if role is Role.STORE:
                protected.extend(protected_store(p))
            elif role is Role.INPUT:
                protected.append(Protected(p, "an input of this command"))
    for name, (option, role) in params.items():
        if role not in OUTPUTS:
            continue
        for p in _paths(values.get(name)):
            try:
                check_output(p, option, protected, folder=role is Role.OUTPUT_DIR)
            except OutputRefused as e:
                fail(str(e))


def guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """`callback` with its outputs checked first (`check_paths`); typer reads the same signature."""
    params = path_params(callback)
    signature = inspect.signature(callback)

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        check_paths(params, dict(bound.arguments))
        return callback(*args, **kwargs)

    run.__legival_guarded__ = True  # type: ignore[attr-defined]
    return run


def guard_every_command(app: Any) -> None:
    """Wrap every registered command's callback in `guarded` (once)."""
    for _words, info in command_infos(app):
        if info.callback is not None and not getattr(info.callback, "__legival_guarded__", False):
            info.callback = guarded(info.callback)
