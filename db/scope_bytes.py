"""The bytes a cache scope holds, against which eviction compares its budget: cache_scope_bytes, one row
a scope kept by triggers on cache_entries and cache_states in the rows' own transactions (migration 0011),
so that the check before every insertion (NIRVANA 5.4) reads one row instead of summing the scope."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

_DIRTY_BYTES = """
SELECT COALESCE(sum(e.bytes + (SELECT COALESCE(sum(s.bytes), 0) FROM cache_states s
                               WHERE s.entry_id = e.id)), 0)
FROM cache_entries e WHERE e.scope = :scope AND e.state = 'dirty'
"""


def scope_bytes(session: Session, *, scope: str) -> int:
    """Bytes a scope holds, live and dirty entries together (what the budget is compared with): one
    row of cache_scope_bytes, which triggers keep (migration 0011)."""
    total = session.scalar(text("SELECT bytes FROM cache_scope_bytes WHERE scope = :scope"), {"scope": scope})
    return int(total or 0)


def scope_bytes_by_state(session: Session, *, scope: str) -> tuple[int, int]:
    """(live bytes, dirty bytes) of a scope, entries' own plus their states'; the dirty part reads only
    the dirty entries (a partial index), whose blobs exist until the next eviction pass removes them."""
    total = scope_bytes(session, scope=scope)
    dirty = int(session.scalar(text(_DIRTY_BYTES), {"scope": scope}) or 0)
    return total - dirty, dirty


def recount_scope_bytes(session: Session, *, scope: str) -> int:
    """The scope's bytes summed from its rows (reads the whole scope): what cache_scope_bytes must hold."""
    query = (
        "SELECT COALESCE((SELECT sum(bytes) FROM cache_entries WHERE scope = :scope), 0) "
        "+ COALESCE((SELECT sum(bytes) FROM cache_states WHERE scope = :scope), 0)"
    )
    return int(session.scalar(text(query), {"scope": scope}) or 0)
