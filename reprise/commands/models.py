"""`reprise models ...`: the models the workers load."""

from __future__ import annotations

from pathlib import Path

import typer

from core.settings import get_settings

models_app = typer.Typer(
    help="Models: build the tiny random ones used when none is configured.", no_args_is_help=True
)


@models_app.command("tiny")
def tiny_command(
    out: Path | None = typer.Option(None, "--out", help="Directory to build in. Default: <data_dir>/models."),
) -> None:
    """Build the tiny random models (no download) unless already built; print their paths."""
    from workers.runtime.tiny import ensure_tiny_models  # torch loads only for this command

    paths = ensure_tiny_models(get_settings(), out=out)
    typer.echo(f"large  {paths.large}")
    typer.echo(f"small  {paths.small}")
    typer.echo(f"clip   {paths.clip_config} + {paths.clip_checkpoint.name}")
    typer.echo("their images are noise: set REPRISE_LARGE_MODEL / REPRISE_SMALL_MODEL for real models")
