"""The `reprise` command line."""

from __future__ import annotations

import typer

app = typer.Typer(help="Reprise: diffusion serving with an approximate cache.", no_args_is_help=True)
