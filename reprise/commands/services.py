"""`reprise services up|down|status` and `reprise migrate`."""

from __future__ import annotations

import typer

from core.errors import EmbeddingDimensionMismatch, ServiceError
from core.settings import get_settings
from reprise.services import manager

services_app = typer.Typer(help="Postgres+pgvector and Redis: configured, or embedded under data_dir.")


@services_app.command("up")
def up() -> None:
    """Start the embedded servers (or check the configured ones). Idempotent."""
    try:
        statuses = manager.up(get_settings())
    except ServiceError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    for status in statuses:
        typer.echo(status.line())


@services_app.command("down")
def down() -> None:
    """Stop the embedded servers this project started; configured servers are left alone."""
    stopped = manager.down(get_settings())
    typer.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@services_app.command("status")
def status() -> None:
    """Show each service: embedded or external, running or stopped, and its URL."""
    for line in manager.status(get_settings()):
        typer.echo(line.line())


def migrate_command(
    revision: str = typer.Option("head", help="Alembic revision to upgrade to."),
    downgrade: str | None = typer.Option(None, help="Downgrade to this revision instead (e.g. base)."),
    check: bool = typer.Option(
        False, "--check", help="Change nothing: exit 0 when the database is at the code's head, 1 if not."
    ),
    wait_s: float = typer.Option(
        0.0, "--wait", help="With --check: seconds to keep checking (every 5 s) until it is at the head."
    ),
) -> None:
    """Apply the database migrations (creates the vector extension and HNSW indexes)."""
    from reprise import migrate

    settings = get_settings()
    if check:
        state = migrate.wait_for_head(settings, wait_s)
        typer.echo(("ok: " if state.at_head else "not migrated: ") + state.line(), err=not state.at_head)
        raise typer.Exit(0 if state.at_head else 1)
    try:
        if downgrade is not None:
            migrate.downgrade(settings, downgrade)
            typer.echo(f"downgraded to {downgrade}")
        else:
            migrate.upgrade(settings, revision)
            typer.echo(f"database at {revision}: {settings.sqlalchemy_url}")
    except EmbeddingDimensionMismatch as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
