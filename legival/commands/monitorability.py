"""`legival monitorability ...`: hint interventions and the g-mean² monitorability score (issue 48,
docs/monitorability.md). The sub-app every `monitorability` subcommand registers on."""

from __future__ import annotations

import typer

from legival.app import app

monitorability_app = typer.Typer(no_args_is_help=True, help="Monitorability: hint interventions and g-mean² (docs/monitorability.md).")
app.add_typer(monitorability_app, name="monitorability")
