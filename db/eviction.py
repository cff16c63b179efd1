"""The SQL of eviction passes (jobs/passes/eviction.py runs them): the per-scope lock, the ranking of a
scope's states by a policy's score in SQL, loading usage records, applying a plan, and the dirty entries.

Scores in SQL mirror jobs.policies.eviction (tests/jobs/passes/test_eviction.py checks that a pass
equals the pure planner run over the whole scope).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime

from sqlalchemy import delete, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from core.usage import MIN_IDLE_SECONDS, EntryUsage, EvictionPlan, StateUsage
from core.vocabulary import EntryState, EvictionPolicyName
from db.models import CacheEntry, CacheState


def db_now(session: Session) -> datetime:
    clock: datetime | None = session.scalar(select(func.now()))
    if clock is None:
        raise RuntimeError("the database returned no time")
    return clock


def lock_scope(session: Session, scope: str) -> None:
    """Hold the scope's eviction lock until the transaction ends: one pass per scope at a time."""
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"reprise.evict:{scope}", 0))))


# Scores in SQL, mirroring jobs.policies.eviction (tests/db/test_cache_eviction.py checks that a pass
# equals the pure planner run over the whole scope). `u` is a unit: a state, or a state-less entry.
_SQL_SCORES: dict[EvictionPolicyName, str] = {
    EvictionPolicyName.LCBFU: "u.access_count::float8 * u.k / "
    "greatest(extract(epoch FROM (CAST(:now AS timestamptz) - u.created_at))::float8, :min_idle)",
    EvictionPolicyName.LFU: "u.access_count::float8",
    EvictionPolicyName.LRU: "extract(epoch FROM u.last_access_at)::float8",
    EvictionPolicyName.LRBU: "u.access_count::float8 * u.k / (greatest(u.bytes, 1)::float8 * "
    "greatest(extract(epoch FROM (CAST(:now AS timestamptz) - u.last_access_at))::float8, :min_idle))",
}

_CUT = """
SELECT DISTINCT entry_id FROM ranked
WHERE rn <= COALESCE((SELECT min(rn) FROM ranked WHERE running >= :to_free), 2147483647) + :margin
"""

_STATE_CANDIDATES = """
WITH units AS (
    SELECT s.entry_id, s.k, s.bytes, s.access_count, s.created_at, s.last_access_at
    FROM cache_states s JOIN cache_entries e ON e.id = s.entry_id
    WHERE e.scope = :scope AND e.state = 'live'
    UNION ALL
    SELECT e.id, :final_k, e.bytes, e.access_count, e.created_at, e.last_access_at
    FROM cache_entries e
    WHERE e.scope = :scope AND e.state = 'live'
      AND NOT EXISTS (SELECT 1 FROM cache_states s WHERE s.entry_id = e.id)
), ranked AS (
    SELECT u.entry_id, row_number() OVER w AS rn, sum(u.bytes) OVER w AS running
    FROM units u
    WINDOW w AS (ORDER BY {score}, u.created_at, u.k, u.entry_id ROWS UNBOUNDED PRECEDING)
)
"""

_ENTRY_CANDIDATES = """
WITH totals AS (
    SELECT e.id AS entry_id, e.created_at,
           e.bytes + COALESCE((SELECT sum(s.bytes) FROM cache_states s WHERE s.entry_id = e.id), 0) AS total
    FROM cache_entries e
    WHERE e.scope = :scope AND e.state = 'live'
), ranked AS (
    SELECT entry_id, row_number() OVER w AS rn, sum(total) OVER w AS running
    FROM totals
    WINDOW w AS (ORDER BY created_at, entry_id ROWS UNBOUNDED PRECEDING)
)
"""

CANDIDATE_MARGIN = 64
"""Units loaded past the point where the SQL ranking reaches the bytes to free: slack for float
rounding between Postgres and Python on LRBU ties."""


def candidate_ids(
    session: Session, scope: str, policy: EvictionPolicyName, to_free: int, now: datetime, final_k: int
) -> list[uuid.UUID]:
    """Entries whose units rank, in SQL, before the cumulative bytes reach `to_free` (plus a margin).

    The planner only ever evicts a prefix of the global ranking, and whole-entry removals only add
    freed bytes, so planning over these entries (with all their states) yields the same plan as
    planning over the whole scope, while Python loads a handful of rows instead of every state.
    """
    if policy is EvictionPolicyName.FIFO:
        query = _ENTRY_CANDIDATES + _CUT
    else:
        query = _STATE_CANDIDATES.format(score=_SQL_SCORES[policy]) + _CUT
    params = {
        "scope": scope,
        "to_free": to_free,
        "margin": CANDIDATE_MARGIN,
        "final_k": final_k,
        "now": now,
        "min_idle": MIN_IDLE_SECONDS,
    }
    return list(session.scalars(text(query), params).all())


def load_usage(session: Session, entry_ids: list[uuid.UUID]) -> list[EntryUsage]:
    """Eviction's view of these entries, with every state they hold."""
    states: dict[uuid.UUID, list[StateUsage]] = defaultdict(list)
    entries: list[EntryUsage] = []
    for start in range(0, len(entry_ids), 1000):
        chunk = entry_ids[start : start + 1000]
        for row in session.execute(
            select(
                CacheState.entry_id,
                CacheState.k,
                CacheState.bytes,
                CacheState.access_count,
                CacheState.created_at,
                CacheState.last_access_at,
            ).where(CacheState.entry_id.in_(chunk))
        ):
            states[row[0]].append(StateUsage(*row))
        entries.extend(
            EntryUsage(entry_id, size, count, created, last, tuple(states.get(entry_id, ())))
            for entry_id, size, count, created, last in session.execute(
                select(
                    CacheEntry.id,
                    CacheEntry.bytes,
                    CacheEntry.access_count,
                    CacheEntry.created_at,
                    CacheEntry.last_access_at,
                ).where(CacheEntry.id.in_(chunk), CacheEntry.state == EntryState.LIVE.value)
            )
        )
    return entries


def apply_plan(session: Session, plan: EvictionPlan) -> list[str]:
    """Delete the planned states' rows and mark whole-entry victims dirty; return the blob keys to delete."""
    keys: list[str] = []
    pairs = [(victim.entry_id, victim.k) for victim in plan.states]
    for start in range(0, len(pairs), 1000):
        keys.extend(
            session.scalars(
                delete(CacheState)
                .where(tuple_(CacheState.entry_id, CacheState.k).in_(pairs[start : start + 1000]))
                .returning(CacheState.blob_key)
            ).all()
        )
    entries = list(plan.entries)
    for start in range(0, len(entries), 1000):
        session.execute(
            update(CacheEntry)
            .where(CacheEntry.id.in_(entries[start : start + 1000]))
            .values(state=EntryState.DIRTY.value)
        )
    return keys


def dirty_entries(session: Session, *, scope: str) -> tuple[list[uuid.UUID], list[str]]:
    """The scope's dirty entries, and the blob keys their rows still name (final latents, states)."""
    dirty = session.execute(
        select(CacheEntry.id, CacheEntry.final_latent_key).where(
            CacheEntry.scope == scope, CacheEntry.state == EntryState.DIRTY.value
        )
    ).all()
    ids = [entry_id for entry_id, _ in dirty]
    keys = [key for _, key in dirty if key is not None]
    keys += session.scalars(select(CacheState.blob_key).where(CacheState.entry_id.in_(ids))).all()
    return ids, keys


def delete_dirty_entries(session: Session, ids: list[uuid.UUID]) -> int:
    """Delete these entries' rows if they are still dirty (their states and index entries go with them)."""
    removed = session.execute(
        delete(CacheEntry)
        .where(CacheEntry.id.in_(ids), CacheEntry.state == EntryState.DIRTY.value)
        .returning(CacheEntry.id)
    ).all()
    return len(removed)


def cache_scopes(session: Session) -> list[str]:
    """Every scope that holds entries (live or dirty)."""
    return list(session.scalars(select(CacheEntry.scope).distinct().order_by(CacheEntry.scope)).all())
