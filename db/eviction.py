"""Eviction passes: keep a cache scope within its byte budget (Settings.cache_budget_bytes, per scope).

A pass, under a per-scope advisory lock:
1. ranks the scope's states in SQL by the configured policy's score (the same scores and tie-breaks
   as jobs.policies.eviction), loads only the entries whose states rank before the bytes to free
   are reached, and asks the pure planner (plan_eviction) which to forget: the same plan as over
   the whole scope, without loading every state into Python;
2. deletes the evicted state rows and marks entries left without states dirty (invisible to
   lookups), and COMMITS;
3. only then deletes the evicted states' blobs;
4. removes every dirty entry of the scope: its blobs first (delete_prefix of the entry's prefix),
   then its row (the states' rows and the HNSW index entry go with it).

Why this order never breaks a job: a job routed to an evicted state either finds no row or finds a
live-looking row whose blob is already gone; db.cache.get_state / read_state_blob turn both into
SourceVanished, and the job runs as a miss. A crash after step 2 leaks at most the evicted states'
blobs, which sit under their entry's prefix and go when the entry does; a crash inside step 4
leaves a dirty row, which the next pass removes.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import EntryState, EvictionPolicyName, HitPolicy
from db.blobs.base import BlobStore
from db.blobs.keys import entry_prefix
from db.cache import scope_bytes_by_state
from db.engine import session_scope
from db.models import CacheEntry, CacheState
from jobs.policies.eviction import MIN_IDLE_SECONDS, EntryUsage, EvictionPlan, StateUsage, plan_eviction
from jobs.policies.k_selection import parse_table


@dataclass(frozen=True, slots=True)
class EvictionReport:
    """What one pass did. `fits`: the scope now has room for the incoming bytes."""

    scope: str
    policy: EvictionPolicyName
    budget_bytes: int
    incoming_bytes: int
    bytes_before: int
    bytes_after: int
    states_evicted: int
    entries_removed: int
    blob_keys_deleted: int

    @property
    def fits(self) -> bool:
        return self.bytes_after + self.incoming_bytes <= self.budget_bytes


def final_latent_k(settings: Settings) -> int:
    """Steps one use of a state-less entry saves, for scoring it (see jobs.policies.eviction).

    Under refine (MoDM) a final latent serves any k: value it like the table's smallest k.
    Under resume (NIRVANA) a hit needs a state: a state-less entry saves nothing.
    """
    if settings.hit_policy is HitPolicy.REFINE:
        return min(parse_table(settings.k_table).ks)
    return 0


def _db_now(session: Session) -> datetime:
    clock: datetime | None = session.scalar(select(func.now()))
    if clock is None:
        raise RuntimeError("the database returned no time")
    return clock


def _lock_scope(session: Session, scope: str) -> None:
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

EVICTION_HEADROOM = 0.02
"""A pass that must run frees this fraction of the budget beyond what is needed, so the inserts that
follow find room without paying a pass each. NIRVANA 5.4 evicts |K| states before every insertion;
batching amortises the ranking query, which reads the whole scope (our choice, not the papers')."""

CANDIDATE_MARGIN = 64
"""Units loaded past the point where the SQL ranking reaches the bytes to free: slack for float
rounding between Postgres and Python on LRBU ties."""


def _candidate_ids(
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


def _apply(session: Session, plan: EvictionPlan) -> list[str]:
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


def remove_dirty_entries(settings: Settings, blobs: BlobStore, *, scope: str) -> tuple[int, int]:
    """Remove the scope's dirty entries: blobs first, then rows.

    Returns (entries removed, blob keys deleted)."""
    with session_scope(settings) as session:
        dirty = session.execute(
            select(CacheEntry.id, CacheEntry.final_latent_key).where(
                CacheEntry.scope == scope, CacheEntry.state == EntryState.DIRTY.value
            )
        ).all()
        ids = [entry_id for entry_id, _ in dirty]
        stray_keys = [key for _, key in dirty if key is not None]
        stray_keys += session.scalars(select(CacheState.blob_key).where(CacheState.entry_id.in_(ids))).all()
    if not ids:
        return 0, 0
    deleted = sum(blobs.delete_prefix(entry_prefix(entry_id)) for entry_id in ids)
    prefixes = tuple(entry_prefix(entry_id) for entry_id in ids)
    outside = [key for key in stray_keys if not key.startswith(prefixes)]  # keys laid out elsewhere
    blobs.delete(outside)
    with session_scope(settings) as session:
        removed = session.execute(
            delete(CacheEntry)
            .where(CacheEntry.id.in_(ids), CacheEntry.state == EntryState.DIRTY.value)
            .returning(CacheEntry.id)
        ).all()
    return len(removed), deleted + len(outside)


def evict_scope(
    settings: Settings,
    blobs: BlobStore,
    *,
    scope: str,
    incoming_bytes: int = 0,
    budget_bytes: int | None = None,
    policy: EvictionPolicyName | None = None,
    now: datetime | None = None,
    headroom: float = EVICTION_HEADROOM,
) -> EvictionReport:
    """One pass: when `scope` holds more than `budget_bytes - incoming_bytes` (defaults: the configured
    budget and policy), evict down to that minus `headroom` x budget; then remove its dirty entries.
    `now` (default: the database's clock) feeds LRBU. Commits its own transactions; safe to run
    concurrently with lookups, uses, inserts and other passes (one pass per scope at a time).
    """
    budget = settings.cache_budget_bytes if budget_bytes is None else budget_bytes
    chosen = settings.eviction_policy if policy is None else policy
    final_k = final_latent_k(settings)
    with session_scope(settings) as session:
        _lock_scope(session, scope)
        live, dirty = scope_bytes_by_state(session, scope=scope)
        to_free = live + incoming_bytes - budget  # dirty entries leave below, whatever the plan
        keys: list[str] = []
        plan = EvictionPlan((), 0)
        if to_free > 0:
            to_free += int(headroom * budget)
            clock = now if now is not None else _db_now(session)
            candidates = _candidate_ids(session, scope, chosen, to_free, clock, final_k)
            plan = plan_eviction(
                load_usage(session, candidates), to_free, chosen, clock, final_latent_k=final_k
            )
            keys = _apply(session, plan)
    # The rows' deletion is committed: from here on no lookup finds these states.
    blobs.delete(keys)
    removed, deleted = remove_dirty_entries(settings, blobs, scope=scope)
    with session_scope(settings) as session:
        after = sum(scope_bytes_by_state(session, scope=scope))
    return EvictionReport(
        scope=scope,
        policy=chosen,
        budget_bytes=budget,
        incoming_bytes=incoming_bytes,
        bytes_before=live + dirty,
        bytes_after=after,
        states_evicted=len(plan.states),
        entries_removed=removed,
        blob_keys_deleted=len(keys) + deleted,
    )


def ensure_room(
    settings: Settings,
    blobs: BlobStore,
    *,
    scope: str,
    incoming_bytes: int,
    headroom: float = EVICTION_HEADROOM,
) -> EvictionReport:
    """Before inserting `incoming_bytes` into `scope`: evict until they fit the budget (NIRVANA 5.4:
    "every insertion is preceded by an eviction" once the cache is full). A scope already with room
    costs one budget query. `report.fits` is False only when the incoming bytes alone pass the budget.
    """
    with session_scope(settings) as session:
        used = sum(scope_bytes_by_state(session, scope=scope))
    if used + incoming_bytes <= settings.cache_budget_bytes:
        return EvictionReport(
            scope=scope,
            policy=settings.eviction_policy,
            budget_bytes=settings.cache_budget_bytes,
            incoming_bytes=incoming_bytes,
            bytes_before=used,
            bytes_after=used,
            states_evicted=0,
            entries_removed=0,
            blob_keys_deleted=0,
        )
    return evict_scope(settings, blobs, scope=scope, incoming_bytes=incoming_bytes, headroom=headroom)


def cache_scopes(session: Session) -> list[str]:
    """Every scope that holds entries (live or dirty)."""
    return list(session.scalars(select(CacheEntry.scope).distinct().order_by(CacheEntry.scope)).all())
