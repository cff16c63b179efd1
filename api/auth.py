"""Authentication: `Authorization: Bearer <API key>`, one key per tenant (or several).

Missing or unknown keys get 401 with WWW-Authenticate (RFC 6750), each counted against the client's
address (api.rate_limit): an address that has spent its tokens is answered 429 before its key costs a
lookup. Authorization is by scoping: every query filters on the tenant, so another tenant's job answers
404, never 403.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.problems import Problem
from api.rate_limit import AddressLimit
from db.models import Tenant
from db.tenants import find_key, hash_key

REALM = "reprise"

bearer_scheme = HTTPBearer(
    auto_error=False,  # we answer 401 problem+json ourselves
    scheme_name="ApiKey",
    description="A tenant's API key (`reprise keys create --tenant NAME`): `Authorization: Bearer <key>`.",
)


def unauthorized(detail: str, *, error: str | None = None) -> Problem:
    challenge = f'Bearer realm="{REALM}"' + (f', error="{error}"' if error else "")
    return Problem(401, detail, slug="unauthorized", headers={"WWW-Authenticate": challenge})


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request comes from: a tenant, and whether its key may read service-wide figures."""

    tenant: Tenant
    admin: bool
    expires_at: datetime | None = None


def caller_for_credentials(*, session: Session, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    if credentials is None or not credentials.credentials:
        raise unauthorized("send an API key as 'Authorization: Bearer <key>'")
    key = find_key(session=session, key=credentials.credentials)
    if key is None or key.revoked_at is not None:
        raise unauthorized("the API key is unknown or revoked", error="invalid_token")
    if key.expires_at is not None and key.expires_at <= datetime.now(UTC):
        raise unauthorized(
            f"the API key expired at {key.expires_at.isoformat()}; ask your operator for a new one "
            "(reprise keys create, or reprise keys rotate before expiry)",
            error="invalid_token",
        )
    return Caller(tenant=key.tenant, admin=key.is_admin, expires_at=key.expires_at)


def counted_caller(
    *, session: Session, credentials: HTTPAuthorizationCredentials | None, address: AddressLimit
) -> Caller:
    """caller_for_credentials for a key the process has not cached: looked up only while the address has
    a token, and its 401 charged to the address (a 429 instead once the address has none). A valid key
    takes no token: its requests count against its tenant."""
    if credentials is not None and credentials.credentials:
        address.check()  # before the lookup: a key guesser is stopped before it costs the database
    try:
        return caller_for_credentials(session=session, credentials=credentials)
    except Problem as refused:
        if refused.status == 401:
            address.charge()
        raise


class CallerCache:
    """Callers by key hash for ttl_s (REPRISE_AUTH_CACHE_S): most requests skip the key lookup. Only
    successes are kept (an unknown key is asked of Postgres each time, so a new key works at once), and
    a cached key past its expiry is asked again."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Caller]] = {}
        self._forgotten: dict[str, float] = {}  # key hash -> when its revocation was heard

    def forget(self, digest: str) -> None:
        """Drop a revoked key (api.revocations); a lookup of it that began before is not kept either."""
        self._entries.pop(digest, None)
        if len(self._forgotten) >= self.max_entries:
            self._forgotten.clear()
        self._forgotten[digest] = time.monotonic()

    def lookup(
        self, credentials: HTTPAuthorizationCredentials | None, load: Callable[[], Caller], *, ttl_s: float
    ) -> Caller:
        if credentials is None or not credentials.credentials or ttl_s <= 0:
            return load()  # raises the 401, or no caching
        digest = hash_key(credentials.credentials)
        now = time.monotonic()
        cached = self._entries.get(digest)
        if cached is not None and now - cached[0] < ttl_s:
            expires = cached[1].expires_at
            if expires is None or expires > datetime.now(UTC):
                return cached[1]
        caller = load()
        if self._forgotten.get(digest, -1.0) >= now:
            return caller  # revoked while it was looked up: answered this once, never kept
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[digest] = (now, caller)
        return caller
