"""What the cache holds, summed per kind of scope (the shared scope, tenants' own) and tier (final
latents, intermediate states): the figures behind reprise_cache_bytes and reprise_cache_entries."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from core.scopes import SHARED_SCOPE
from db.models import CacheEntry, CacheState


@dataclass(frozen=True, slots=True)
class ScopeFootprint:
    scope: str  # "shared" or "tenant": a label per tenant would grow with every tenant
    entries: int
    final_bytes: int
    state_bytes: int


def cache_footprint(session: Session) -> list[ScopeFootprint]:
    """Entries and bytes per kind of scope, both kinds always present."""
    kind = case((CacheEntry.scope == SHARED_SCOPE, "shared"), else_="tenant")
    entries = dict.fromkeys(("shared", "tenant"), (0, 0))
    for scope, count, total in session.execute(
        select(kind, func.count(), func.coalesce(func.sum(CacheEntry.bytes), 0)).group_by(kind)
    ):
        entries[scope] = (int(count), int(total))
    states = dict.fromkeys(("shared", "tenant"), 0)
    for scope, total in session.execute(
        select(kind, func.coalesce(func.sum(CacheState.bytes), 0))
        .join(CacheEntry, CacheEntry.id == CacheState.entry_id)
        .group_by(kind)
    ):
        states[scope] = int(total)
    return [
        ScopeFootprint(scope, entries[scope][0], entries[scope][1], states[scope])
        for scope in ("shared", "tenant")
    ]
