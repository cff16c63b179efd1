"""Tenants and their API keys. A key is shown once at creation; only its sha256 is stored."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from core.signing import generate_secret
from db.models import ApiKey, Tenant

KEY_PREFIX = "rp_"
SHOWN_PREFIX_CHARS = 10  # how much of a key the table keeps in clear, to tell keys apart


def hash_key(key: str) -> str:
    """sha256 hex of the whole key. Keys are 256 random bits: a slow hash would add nothing."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IssuedKey:
    api_key: ApiKey
    key: str  # the clear key: give it to the client now, it cannot be recovered later


def create_tenant(
    *, session: Session, name: str, shared_cache: bool = False, inflight_limit: int | None = None
) -> Tenant:
    """A tenant with a fresh Standard Webhooks secret (whsec_...)."""
    tenant = Tenant(id=uuid.uuid4(), name=name, webhook_secret=generate_secret(), shared_cache=shared_cache)
    if inflight_limit is not None:
        tenant.inflight_limit = inflight_limit
    session.add(tenant)
    session.flush()
    return tenant


def get_tenant_by_name(*, session: Session, name: str) -> Tenant | None:
    return session.scalars(select(Tenant).where(Tenant.name == name)).one_or_none()


def create_api_key(
    *, session: Session, tenant_id: uuid.UUID, admin: bool = False, expires_at: datetime | None = None
) -> IssuedKey:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey(
        id=uuid.uuid4(),
        tenant_id=tenant_id,
        key_hash=hash_key(key),
        prefix=key[:SHOWN_PREFIX_CHARS],
        is_admin=admin,
        expires_at=expires_at,
    )
    session.add(api_key)
    session.flush()
    return IssuedKey(api_key=api_key, key=key)


@dataclass(frozen=True, slots=True)
class TenantCredentials:
    """What a client needs, shown once: the clear API key and the tenant's webhook secret."""

    tenant_id: uuid.UUID
    name: str
    api_key: str
    webhook_secret: str
    shared_cache: bool
    inflight_limit: int
    key_id: uuid.UUID | None = None
    admin: bool = False
    expires_at: datetime | None = None

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def issue_key(
    *,
    session: Session,
    name: str,
    shared_cache: bool = False,
    inflight_limit: int | None = None,
    admin: bool = False,
    expires_at: datetime | None = None,
) -> TenantCredentials:
    """A new key for the tenant `name`, creating the tenant when new. For an existing tenant,
    shared_cache=True opts it in (never out) and inflight_limit, when given, replaces its limit.
    An admin key may also read service-wide figures (/v1/stats?scope=global)."""
    tenant = get_tenant_by_name(session=session, name=name)
    if tenant is None:
        tenant = create_tenant(
            session=session, name=name, shared_cache=shared_cache, inflight_limit=inflight_limit
        )
    else:
        tenant.shared_cache = tenant.shared_cache or shared_cache
        if inflight_limit is not None:
            tenant.inflight_limit = inflight_limit
        session.flush()
    issued = create_api_key(session=session, tenant_id=tenant.id, admin=admin, expires_at=expires_at)
    return TenantCredentials(
        tenant_id=tenant.id,
        name=tenant.name,
        api_key=issued.key,
        webhook_secret=tenant.webhook_secret,
        shared_cache=tenant.shared_cache,
        inflight_limit=tenant.inflight_limit,
        key_id=issued.api_key.id,
        admin=admin,
        expires_at=expires_at,
    )


def find_key(*, session: Session, key: str) -> ApiKey | None:
    """The API key row (with its tenant) for a clear key, revoked or expired ones included, so that
    the caller can say which. Looks up by hash, so no clear key is compared."""
    return session.scalars(
        select(ApiKey).options(joinedload(ApiKey.tenant)).where(ApiKey.key_hash == hash_key(key))
    ).one_or_none()


def find_tenant_by_key(*, session: Session, key: str) -> Tenant | None:
    """The tenant owning a usable (unrevoked, unexpired) key, or None."""
    found = find_key(session=session, key=key)
    if found is None or found.revoked_at is not None:
        return None
    if found.expires_at is not None and found.expires_at <= datetime.now(UTC):
        return None
    return found.tenant
