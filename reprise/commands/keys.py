"""`reprise keys ...`: tenants, their API keys (create, list, revoke, rotate) and webhook secrets."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from redis.exceptions import RedisError

from core.errors import UnknownKey
from core.server_keys import webhook_secret_keys
from core.settings import get_settings
from db.engine import session_scope
from db.keys import list_keys, revoke_key, rotate_key, rotate_webhook_secret
from db.models import ApiKey
from db.secret_box import reencrypt_tenants
from db.tenants import issue_key
from jobs.broker import broker_client
from jobs.key_events import announce_revoked

keys_app = typer.Typer(help="Tenants and API keys.", no_args_is_help=True)

DURATION = re.compile(r"^\s*(\d+)\s*([dhms]?)\s*$")
UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}


def parse_duration(text: str, option: str) -> timedelta:
    """'30d', '12h', '90m', '3600s' or '3600' (seconds)."""
    match = DURATION.match(text)
    if match is None:
        raise typer.BadParameter(
            f"{text!r} is not a duration: write e.g. 30d, 12h, 90m or 3600s", param_hint=option
        )
    return timedelta(seconds=int(match.group(1)) * UNIT_S[match.group(2)])


def _key_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a key id; `reprise keys list` shows them") from None


def _jsonable(value: Any) -> Any:
    return (
        value.isoformat()
        if isinstance(value, datetime)
        else str(value)
        if isinstance(value, uuid.UUID)
        else value
    )


@keys_app.callback()
def _group() -> None:
    """Tenants and API keys."""  # a callback keeps `keys create` a subcommand, also on its own


@keys_app.command("create")
def create_key_command(
    tenant: str | None = typer.Option(
        None, "--tenant", help="Tenant name; created when new. With --admin, defaults to 'admin'."
    ),
    shared_cache: bool = typer.Option(
        False, "--shared-cache", help="Opt the tenant in to the shared cache scope (never turned off here)."
    ),
    inflight_limit: int | None = typer.Option(
        None, min=1, help="Most unfinished jobs the tenant may have (default for a new tenant: 64)."
    ),
    admin: bool = typer.Option(
        False, "--admin", help="The key may also read service-wide figures (/v1/stats?scope=global)."
    ),
    expires_in: str | None = typer.Option(None, "--expires-in", help="Expire the key after e.g. 30d, 12h."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of lines."),
) -> None:
    """Create an API key for a tenant; prints the key (shown only now) and the tenant's webhook secret."""
    if tenant is None and not admin:
        raise typer.BadParameter("name the tenant the key is for (or pass --admin)", param_hint="--tenant")
    name = (tenant or "admin").strip()
    if not name or len(name) > 200:
        raise typer.BadParameter("a tenant name has 1 to 200 characters", param_hint="--tenant")
    expires_at = (
        datetime.now(UTC) + parse_duration(expires_in, "--expires-in") if expires_in is not None else None
    )
    with session_scope(get_settings()) as session:
        issued = issue_key(
            session=session,
            name=name,
            shared_cache=shared_cache,
            inflight_limit=inflight_limit,
            admin=admin,
            expires_at=expires_at,
        )
    if as_json:
        fields = {field: getattr(issued, field) for field in issued.__dataclass_fields__}
        typer.echo(json.dumps({key: _jsonable(value) for key, value in fields.items()}))
        return
    typer.echo(f"tenant:         {issued.name} ({issued.tenant_id})")
    typer.echo(f"api key:        {issued.api_key}")
    typer.echo(f"key id:         {issued.key_id}{'  (admin)' if admin else ''}")
    typer.echo(f"expires:        {expires_at.isoformat() if expires_at else 'never'}")
    typer.echo(f"webhook secret: {issued.webhook_secret}")
    typer.echo(f"shared cache:   {'on' if issued.shared_cache else 'off'}")
    typer.echo("The API key is shown only now: only its hash is stored.", err=True)


@keys_app.command("list")
def list_keys_command(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's keys."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array."),
) -> None:
    """Every key: id, tenant, its first characters (never the key), role, state and dates."""
    now = datetime.now(UTC)
    with session_scope(get_settings()) as session:
        keys = list_keys(session, tenant=tenant)
    rows = [
        {
            "id": str(key.id),
            "tenant": key.tenant,
            "prefix": key.prefix,
            "admin": key.admin,
            "state": key.state(now),
            "created_at": _jsonable(key.created_at),
            "expires_at": _jsonable(key.expires_at),
            "revoked_at": _jsonable(key.revoked_at),
        }
        for key in keys
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        role = "admin" if row["admin"] else "tenant"
        expiry = f"expires {row['expires_at']}" if row["expires_at"] else ""
        typer.echo(f"{row['id']}  {row['prefix']}…  {row['tenant']:<24} {role:<6} {row['state']:<8} {expiry}")


@keys_app.command("revoke")
def revoke_key_command(key_id: str = typer.Argument(..., help="The key's id (reprise keys list).")) -> None:
    """Revoke a key now: its next request gets 401, on every API process, and its event streams close."""
    try:
        with session_scope(get_settings()) as session:
            changed = revoke_key(session, _key_id(key_id))
            key_hash = session.get_one(ApiKey, _key_id(key_id)).key_hash
    except UnknownKey as error:
        raise typer.BadParameter(str(error), param_hint="KEY_ID") from None
    _tell_api_processes(key_hash)  # after the commit: a process that hears it reads the key revoked
    typer.echo(f"revoked {key_id}" if changed else f"{key_id} was revoked already")


def _tell_api_processes(key_hash: str) -> None:
    """Announce a key's revocation or shortened life to every API process (jobs.key_events), so that
    none trusts it from its key cache any longer; without Redis each stops within REPRISE_AUTH_CACHE_S."""
    settings = get_settings()
    try:
        announce_revoked(broker_client(settings, socket_timeout=5, socket_connect_timeout=5), key_hash)
    except RedisError as error:
        typer.echo(
            f"warning: the API processes were not told ({error}); each stops trusting the key within "
            f"REPRISE_AUTH_CACHE_S ({settings.auth_cache_s:g} s)",
            err=True,
        )


@keys_app.command("rotate")
def rotate_key_command(
    key_id: str = typer.Argument(..., help="The key's id (reprise keys list)."),
    overlap: str = typer.Option("24h", "--overlap", help="How long the old key keeps working."),
) -> None:
    """Issue a new key for the same tenant and role; the old one expires after the overlap."""
    window = parse_duration(overlap, "--overlap")
    try:
        with session_scope(get_settings()) as session:
            issued = rotate_key(session, _key_id(key_id), overlap=window)
            old_hash = session.get_one(ApiKey, _key_id(key_id)).key_hash
    except UnknownKey as error:
        raise typer.BadParameter(str(error), param_hint="KEY_ID") from None
    _tell_api_processes(old_hash)  # its life ends with the overlap now: no cache may hold it longer
    typer.echo(f"api key:        {issued.key}")
    typer.echo(f"key id:         {issued.api_key.id}")
    typer.echo(f"old key {key_id} expires at {(datetime.now(UTC) + window).isoformat()}")
    typer.echo("The API key is shown only now: only its hash is stored.", err=True)


@keys_app.command("rotate-webhook-secret")
def rotate_secret_command(
    tenant: str = typer.Option(..., "--tenant", help="The tenant whose webhook secret rotates."),
    overlap: str = typer.Option(
        "24h", "--overlap", help="How long deliveries also carry the old secret's signature."
    ),
) -> None:
    """A new webhook secret; until the overlap ends, each delivery carries both signatures."""
    window = parse_duration(overlap, "--overlap")
    try:
        with session_scope(get_settings()) as session:
            rotated = rotate_webhook_secret(session, tenant=tenant, overlap=window)
    except UnknownKey as error:
        raise typer.BadParameter(str(error), param_hint="--tenant") from None
    typer.echo(f"webhook secret: {rotated.secret}")
    typer.echo(f"the previous secret also signs deliveries until {rotated.previous_valid_until.isoformat()}")


@keys_app.command("reencrypt")
def reencrypt_command() -> None:
    """Encrypt every tenant's webhook secrets again with the first of REPRISE_WEBHOOK_SECRET_KEYS: the
    step of a key rotation after which the old key may be removed (docs/operations.md)."""
    settings = get_settings()
    keys = webhook_secret_keys(settings)
    with session_scope(settings) as session:
        count = reencrypt_tenants(session.connection(), keys)
    typer.echo(f"re-encrypted the webhook secrets of {count} tenants with the first of {len(keys)} keys")
