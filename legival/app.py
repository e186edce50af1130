"""The `legival` application object and the options every command shares.

Commands live in `legival/commands/<name>.py` (one module per command or group); `legival/cli.py`
imports them all. One typer app, one error style, a progress bar on a terminal, and one line of JSON
at the end of standard output (../shared/CLI.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from legival.console import fail

if TYPE_CHECKING:
    from legival_core.store import Store

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Legi-Val: how legible are the reasoning traces of reasoning models?",
    pretty_exceptions_enable=False,
)

DbOption = Annotated[Path, typer.Option("--db", help="DuckDB store file (created if missing).")]


def open_store(db: Path) -> Store:
    """Open the store or exit with a readable error (DuckDB allows one process per file)."""
    from legival_core.store import Store, StoreLocked

    try:
        return Store(db)
    except StoreLocked as e:
        fail(str(e))
        raise  # unreachable: fail exits
