"""`reprise config docs`: the settings reference, every REPRISE_* variable with its type, default and
description, grouped by subsystem, as docs/configuration.md holds it."""

from __future__ import annotations

import typer

from core.settings.reference import describe

config_app = typer.Typer(help="The configuration: every REPRISE_* setting.", no_args_is_help=True)


@config_app.callback()
def _group() -> None:
    """The configuration: every REPRISE_* setting."""  # keeps `config docs` a subcommand


@config_app.command("docs")
def docs_command() -> None:
    """Print docs/configuration.md, the settings reference, generated from core/settings/."""
    typer.echo(describe(), nl=False)
