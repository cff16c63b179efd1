"""Cache scopes: which part of the cache a job may read and write.

A tenant's entries live in its own scope ("tenant:<uuid>"); tenants that opted in (the tenant's
`shared_cache` flag) and whose request asked for it (`cache: "shared"`) also read and write the
"shared" scope. One tenant's entries never reach another unless both opted in (DESIGN: cache scope).
This is the one place the rule is written; admission (reads) and generation (writes) both call it.
"""

from __future__ import annotations

import uuid
from enum import StrEnum

SHARED_SCOPE = "shared"
TENANT_SCOPE_PREFIX = "tenant:"


class CacheMode(StrEnum):
    """What a request asks of the cache (the `cache` field of POST /v1/generations)."""

    AUTO = "auto"  # the tenant's own scope
    OFF = "off"  # neither read nor write the cache
    SHARED = "shared"  # also the shared scope, when the tenant opted in


def tenant_scope(tenant_id: uuid.UUID) -> str:
    """The private cache scope of one tenant."""
    return f"{TENANT_SCOPE_PREFIX}{tenant_id}"


def uses_shared_scope(*, tenant_opted_in: bool, cache_mode: str) -> bool:
    """A job reads and writes the shared scope only when its tenant opted in and the request asked."""
    return tenant_opted_in and cache_mode == CacheMode.SHARED


def lookup_scopes(tenant_id: uuid.UUID, *, shared_cache: bool) -> tuple[str, ...]:
    """The scopes a job's lookup may read: its tenant's own, plus the shared one when it may share."""
    own = tenant_scope(tenant_id)
    return (own, SHARED_SCOPE) if shared_cache else (own,)


def insert_scope(tenant_id: uuid.UUID, *, shared_cache: bool) -> str:
    """The scope a job's result is cached in: the shared one when it may share, else its tenant's."""
    return SHARED_SCOPE if shared_cache else tenant_scope(tenant_id)


VIDEO_PREFIX = "video:"


def video_scope(scope: str) -> str:
    """Where a scope's video entries live: apart from its images, so an image lookup never
    finds a video latent, and with their own byte budget and eviction policy (FlexCache's LRBU)."""
    return VIDEO_PREFIX + scope


def is_video_scope(scope: str) -> bool:
    return scope.startswith(VIDEO_PREFIX)
