"""`reprise keys ...`: tenants and their API keys."""

from __future__ import annotations

import dataclasses
import json

import typer

from core.settings import get_settings
from db.engine import session_scope
from db.tenants import issue_key

keys_app = typer.Typer(help="Tenants and API keys.", no_args_is_help=True)


@keys_app.callback()
def _group() -> None:
    """Tenants and API keys."""  # a callback keeps `keys create` a subcommand, also on its own


@keys_app.command("create")
def create_key_command(
    tenant: str = typer.Option(..., "--tenant", help="Tenant name; created when new."),
    shared_cache: bool = typer.Option(
        False, "--shared-cache", help="Opt the tenant in to the shared cache scope (never turned off here)."
    ),
    inflight_limit: int | None = typer.Option(
        None, min=1, help="Most unfinished jobs the tenant may have (default for a new tenant: 64)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of lines."),
) -> None:
    """Create an API key for a tenant; prints the key (shown only now) and the tenant's webhook secret."""
    name = tenant.strip()
    if not name or len(name) > 200:
        raise typer.BadParameter("a tenant name has 1 to 200 characters", param_hint="--tenant")
    with session_scope(get_settings()) as session:
        issued = issue_key(
            session=session, name=name, shared_cache=shared_cache, inflight_limit=inflight_limit
        )
    if as_json:
        typer.echo(json.dumps({**dataclasses.asdict(issued), "tenant_id": str(issued.tenant_id)}))
        return
    typer.echo(f"tenant:         {issued.name} ({issued.tenant_id})")
    typer.echo(f"api key:        {issued.api_key}")
    typer.echo(f"webhook secret: {issued.webhook_secret}")
    typer.echo(f"shared cache:   {'on' if issued.shared_cache else 'off'}")
    typer.echo("The API key is shown only now: only its hash is stored.", err=True)
