"""The life of API keys and webhook secrets after creation: listing, revoking, rotating."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from core.errors import UnknownKey
from core.signing import generate_secret
from db.models import ApiKey, Tenant
from db.tenants import IssuedKey, create_api_key, get_tenant_by_name


@dataclass(frozen=True, slots=True)
class KeyView:
    """What an operator may see of a key: never the key, only its first characters."""

    id: uuid.UUID
    tenant: str
    prefix: str
    admin: bool
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def state(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


def list_keys(session: Session, *, tenant: str | None = None) -> list[KeyView]:
    query = select(ApiKey).options(joinedload(ApiKey.tenant)).order_by(ApiKey.created_at)
    if tenant is not None:
        query = query.join(Tenant, Tenant.id == ApiKey.tenant_id).where(Tenant.name == tenant)
    return [
        KeyView(
            id=key.id,
            tenant=key.tenant.name,
            prefix=key.prefix,
            admin=key.is_admin,
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
        )
        for key in session.scalars(query)
    ]


def _key(session: Session, key_id: uuid.UUID) -> ApiKey:
    key = session.get(ApiKey, key_id, with_for_update=True)
    if key is None:
        raise UnknownKey(f"no API key {key_id}; `reprise keys list` shows the ids")
    return key


def revoke_key(session: Session, key_id: uuid.UUID) -> bool:
    """Revoke at once. False when it was revoked already."""
    key = _key(session, key_id)
    if key.revoked_at is not None:
        return False
    key.revoked_at = datetime.now(UTC)
    return True


def rotate_key(session: Session, key_id: uuid.UUID, *, overlap: timedelta) -> IssuedKey:
    """A new key for the same tenant and role; the old one keeps working for `overlap`, then expires
    (never later than it would have)."""
    old = _key(session, key_id)
    if old.revoked_at is not None:
        raise UnknownKey(f"API key {key_id} is revoked; create a new one with `reprise keys create`")
    now = datetime.now(UTC)
    until = now + overlap
    old.expires_at = until if old.expires_at is None else min(old.expires_at, until)
    return create_api_key(session=session, tenant_id=old.tenant_id, admin=old.is_admin)


@dataclass(frozen=True, slots=True)
class RotatedSecret:
    tenant: str
    secret: str
    previous_valid_until: datetime


def rotate_webhook_secret(session: Session, *, tenant: str, overlap: timedelta) -> RotatedSecret:
    """Make a new webhook secret current; deliveries are signed with both until the overlap ends
    (Standard Webhooks: a space-separated list of signatures), so receivers can switch at leisure."""
    row = get_tenant_by_name(session=session, name=tenant)
    if row is None:
        raise UnknownKey(f"no tenant {tenant!r}; `reprise keys list` shows the tenants")
    until = datetime.now(UTC) + overlap
    row.previous_webhook_secret, row.previous_webhook_secret_until = row.webhook_secret, until
    row.webhook_secret = generate_secret()
    session.flush()
    return RotatedSecret(tenant=row.name, secret=row.webhook_secret, previous_valid_until=until)


def signing_secrets(tenant: Tenant, *, now: datetime | None = None) -> list[str]:
    """The secrets a delivery is signed with now: the current one, and the previous one during its
    overlap."""
    current = now or datetime.now(UTC)
    secrets = [tenant.webhook_secret]
    until = tenant.previous_webhook_secret_until
    if tenant.previous_webhook_secret and until is not None and until > current:
        secrets.append(tenant.previous_webhook_secret)
    return secrets
