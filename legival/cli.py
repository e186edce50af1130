"""Entry point of the `legival` console script: the app with every command module imported.

Each module in `legival/commands/` decorates `legival.app.app`; they are all imported here, so a new
command is one new module and nothing else.
"""

import importlib
import pkgutil

from legival import commands
from legival.app import app
from legival.paths import guard_every_command

for _mod in pkgutil.iter_modules(commands.__path__):
    importlib.import_module(f"{commands.__name__}.{_mod.name}")
guard_every_command(app)  # every output checked against the store's files and the inputs (legival/paths.py)

__all__ = ["app"]


def main() -> None:
    """The console script: the app (its group holds the error boundary, `legival.app.LegivalGroup`)."""
    from legival.lifecycle.signals import exit_promptly

    try:
        app()
    except SystemExit:
        exit_promptly()  # after a signal, no wait for the threads a library left behind (legival/lifecycle/signals.py)
        raise
