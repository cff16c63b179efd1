"""The SQL of eviction passes (jobs/passes/eviction.py runs them): the per-scope lock, finding the
candidates of a pass, loading usage records, applying a plan, and the dirty entries.

A pass costs in proportion to what it frees, not to the scope (ranking every unit with a
window function took 7.1 s at 100k entries): FIFO, LRU and LFU read their exact ranking's prefix in
index order (migration 0009's indexes); LCBFU and LRBU, whose scores move with the clock, rank a
random sample on large scopes. tests/jobs/passes/test_eviction.py checks that a pass on a small scope
equals the pure planner run over the whole scope, under every policy.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.orm import Session

from core.usage import MIN_IDLE_SECONDS, EntryUsage, EvictionPlan, StateUsage
from core.vocabulary import EntryState, EvictionPolicyName
from db import eviction_sample
from db.blobs.keys import entry_prefix
from db.models import BlobDeletion, CacheEntry, CacheScopeBytes, CacheState


def db_now(session: Session) -> datetime:
    clock: datetime | None = session.scalar(select(func.now()))
    if clock is None:
        raise RuntimeError("the database returned no time")
    return clock


def lock_scope(session: Session, scope: str) -> None:
    """Hold the scope's eviction lock until the transaction ends: one pass per scope at a time."""
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"reprise.evict:{scope}", 0))))


@dataclass(frozen=True, slots=True)
class Candidates:
    """The entries a pass plans over (with all their states), and how it found them: `rows_read` rows
    came back from the database, from a random sample of the scope when `sampled`. A sample comes
    with its usage records already read (`usage`)."""

    entry_ids: list[uuid.UUID]
    rows_read: int
    sampled: bool = False
    usage: list[EntryUsage] | None = None  # read with the sample; None: load_usage(entry_ids)


def candidate_ids(
    session: Session,
    scope: str,
    policy: EvictionPolicyName,
    to_free: int,
    now: datetime,
    final_k: int,
    *,
    sample_factor: int = 0,
    exact_entries: int = 0,
    rng: random.Random | None = None,
) -> Candidates:
    """Entries holding the units a pass may evict to free `to_free` bytes under `policy`.

    FIFO, LRU, LFU: the exact ranking's prefix, read in index order (cost ~ what is freed). LCBFU,
    LRBU score against `now`, which no index orders: on a scope of at least `exact_entries` live
    entries with `sample_factor` > 0, a random sample holding `sample_factor` x `to_free` bytes
    (the planner evicts its lowest-scoring units: Redis' approximated LRU); otherwise the whole
    scope ranked in SQL. Planning over the exact prefix's entries yields the plan over the whole scope:
    the planner evicts a prefix of the ranking, and whole-entry removals only add freed bytes.
    """
    if policy is EvictionPolicyName.FIFO:
        rows, _ = _walk(session, lambda last: _fifo_chunk(scope, last), to_free)
        return Candidates(list(dict.fromkeys(row[1] for row in rows)), len(rows))
    if policy in _ORDER_COLUMN:
        return _ordered_units(session, scope, policy, to_free, final_k)
    if sample_factor > 0 and not _fewer_entries_than(session, scope, exact_entries):
        return _sampled(session, scope, sample_factor * to_free, rng or random.Random())
    ids = _ranked_ids(session, scope, policy, to_free, now, final_k)
    return Candidates(ids, len(ids))


# --- the exact ranking in SQL (LCBFU, LRBU on small scopes) -------------------------------------------

# Scores in SQL, mirroring jobs.policies.eviction (tests/jobs/passes/test_eviction.py checks that a
# pass equals the pure planner run over the whole scope). `u` is a unit: a state, or a state-less entry.
_SQL_SCORES: dict[EvictionPolicyName, str] = {
    EvictionPolicyName.LCBFU: "u.access_count::float8 * u.k / "
    "greatest(extract(epoch FROM (CAST(:now AS timestamptz) - u.created_at))::float8, :min_idle)",
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
    WHERE s.scope = :scope AND e.state = 'live'
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

CANDIDATE_MARGIN = 64
"""Units loaded past the point where the SQL ranking reaches the bytes to free: slack for float
rounding between Postgres and Python on LRBU ties."""


def _ranked_ids(
    session: Session, scope: str, policy: EvictionPolicyName, to_free: int, now: datetime, final_k: int
) -> list[uuid.UUID]:
    """Rank every unit of the scope by its score in SQL, cut where the bytes reach `to_free` (+ margin)."""
    params = {
        "scope": scope,
        "to_free": to_free,
        "margin": CANDIDATE_MARGIN,
        "final_k": final_k,
        "now": now,
        "min_idle": MIN_IDLE_SECONDS,
    }
    query = _STATE_CANDIDATES.format(score=_SQL_SCORES[policy]) + _CUT
    return list(session.scalars(text(query), params).all())


# --- index order (FIFO, LRU, LFU) ---------------------------------------------------------------------

_ORDER_COLUMN: dict[EvictionPolicyName, str] = {
    EvictionPolicyName.LRU: "last_access_at",
    EvictionPolicyName.LFU: "access_count",
}

FIRST_CHUNK = 256
"""Rows of the first read in index order (or of a sample); later reads are sized from the bytes per
row seen so far, at least doubling."""

_States = tuple[Any, datetime, int, uuid.UUID, int]  # (score column, created_at, k, entry id, bytes)
_Chunk = Callable[[tuple[Any, ...] | None], tuple[str, dict[str, Any]]]

_STATES_IN_ORDER = """
SELECT s.{col}, s.created_at, s.k, s.entry_id, s.bytes
FROM cache_states s JOIN cache_entries e ON e.id = s.entry_id
WHERE s.scope = :scope AND e.state = 'live' {after}
ORDER BY s.{col}, s.created_at, s.k, s.entry_id
LIMIT :n
"""

_STATELESS = """
SELECT e.{col}, e.created_at, CAST(:final_k AS integer), e.id, e.bytes
FROM cache_entries e
WHERE e.scope = :scope AND e.state = 'live' {bound}
  AND NOT EXISTS (SELECT 1 FROM cache_states s WHERE s.entry_id = e.id)
"""

# A state-less entry ranks before the cut only if its score does; under LRU its last access is no
# earlier than its creation, so the FIFO index bounds the entries read to those created before the cut.
_STATELESS_BOUND: dict[EvictionPolicyName, str] = {
    EvictionPolicyName.LRU: "AND e.created_at <= :cut AND e.last_access_at <= :cut",
    EvictionPolicyName.LFU: "AND e.access_count <= :cut",
}

_FIFO_IN_ORDER = """
SELECT e.created_at, e.id,
       e.bytes + COALESCE((SELECT sum(s.bytes) FROM cache_states s WHERE s.entry_id = e.id), 0)
FROM cache_entries e
WHERE e.scope = :scope AND e.state = 'live' {after}
ORDER BY e.created_at, e.id
LIMIT :n
"""


def _fifo_chunk(scope: str, last: tuple[Any, ...] | None) -> tuple[str, dict[str, Any]]:
    if last is None:
        return _FIFO_IN_ORDER.format(after=""), {"scope": scope}
    after = "AND (e.created_at, e.id) > (:a0, :a1)"
    return _FIFO_IN_ORDER.format(after=after), {"scope": scope, "a0": last[0], "a1": last[1]}


def _states_chunk(scope: str, col: str, last: tuple[Any, ...] | None) -> tuple[str, dict[str, Any]]:
    if last is None:
        return _STATES_IN_ORDER.format(col=col, after=""), {"scope": scope}
    after = f"AND (s.{col}, s.created_at, s.k, s.entry_id) > (:a0, :a1, :a2, :a3)"
    params = {"scope": scope, "a0": last[0], "a1": last[1], "a2": last[2], "a3": last[3]}
    return _STATES_IN_ORDER.format(col=col, after=after), params


def _walk(session: Session, chunk: _Chunk, to_free: int) -> tuple[list[tuple[Any, ...]], bool]:
    """Rows in index order (bytes last) until their bytes reach `to_free`; True when the scope ran out
    first. Keyset pagination: each read starts after the last row of the previous one."""
    rows: list[tuple[Any, ...]] = []
    freed, size = 0, FIRST_CHUNK
    while True:
        query, params = chunk(rows[-1] if rows else None)
        batch = [tuple(row) for row in session.execute(text(query), {**params, "n": size})]
        for row in batch:
            rows.append(row)
            freed += int(row[-1])
            if freed >= to_free:
                return rows, False
        if len(batch) < size:
            return rows, True
        per_row = max(freed // len(rows), 1)
        size = max(2 * size, math.ceil(2 * (to_free - freed) / per_row))


def _ordered_units(
    session: Session, scope: str, policy: EvictionPolicyName, to_free: int, final_k: int
) -> Candidates:
    """LRU or LFU: states in index order up to the bytes to free, merged with the state-less entries
    that rank before that cut, then cut again over both."""
    col = _ORDER_COLUMN[policy]
    states, exhausted = _walk(session, lambda last: _states_chunk(scope, col, last), to_free)
    bound = "" if exhausted or not states else _STATELESS_BOUND[policy]
    params = {"scope": scope, "final_k": final_k, "cut": states[-1][0] if states else None}
    stateless = [tuple(row) for row in session.execute(text(_STATELESS.format(col=col, bound=bound)), params)]
    units = sorted([*states, *stateless], key=lambda unit: (unit[0], unit[1], unit[2], unit[3].bytes))
    ids: dict[uuid.UUID, None] = {}
    freed = 0
    for unit in units:
        if freed >= to_free:
            break
        ids[unit[3]] = None
        freed += int(unit[4])
    return Candidates(list(ids), len(states) + len(stateless))


# --- a random sample (LCBFU, LRBU on large scopes): db/eviction_sample.py -----------------------------


def _fewer_entries_than(session: Session, scope: str, n: int) -> bool:
    """Whether the scope has fewer than n live entries (reads at most n index entries)."""
    query = (
        "SELECT count(*) FROM (SELECT 1 FROM cache_entries WHERE scope = :scope AND state = 'live' "
        "LIMIT :n) t"
    )
    return int(session.scalar(text(query), {"scope": scope, "n": n}) or 0) < n


def _sampled(session: Session, scope: str, target_bytes: int, rng: random.Random) -> Candidates:
    usage, rows = eviction_sample.sample_usage(session, scope, target_bytes, rng)
    return Candidates([entry.entry_id for entry in usage], rows, sampled=True, usage=usage)


_USAGE_STATES = """
SELECT entry_id, k, bytes, access_count, created_at, last_access_at FROM cache_states
WHERE entry_id = ANY(:ids)
"""

_USAGE_ENTRIES = """
SELECT id, bytes, access_count, created_at, last_access_at FROM cache_entries
WHERE id = ANY(:ids) AND state = 'live'
"""

USAGE_CHUNK = 10_000
"""Entries loaded per statement (one uuid[] parameter each)."""


def load_usage(session: Session, entry_ids: list[uuid.UUID]) -> list[EntryUsage]:
    """Eviction's view of these entries, with every state they hold."""
    states: dict[uuid.UUID, list[StateUsage]] = defaultdict(list)
    entries: list[EntryUsage] = []
    for start in range(0, len(entry_ids), USAGE_CHUNK):
        chunk = {"ids": entry_ids[start : start + USAGE_CHUNK]}
        for row in session.execute(text(_USAGE_STATES), chunk):
            states[row[0]].append(StateUsage(*row))
        entries.extend(
            EntryUsage(entry_id, size, count, created, last, tuple(states.get(entry_id, ())))
            for entry_id, size, count, created, last in session.execute(text(_USAGE_ENTRIES), chunk)
        )
    return entries


@dataclass(frozen=True, slots=True)
class Outbox:
    """Blobs whose rows a transaction deleted, recorded in blob_deletions (rows `ids`) in that transaction:
    deleted from the store after it commits, then forgotten (jobs.passes.eviction)."""

    ids: list[int]
    keys: list[str]
    prefixes: list[str]


# `s.entry_id = ANY(...)` makes the planner read the victims' states through their index: joined with
# the unnest alone it estimated a hash join over a sequential scan of every state (0.26 s at 720k
# states, growing with the table).
_DELETE_STATES = """
DELETE FROM cache_states s USING unnest(CAST(:entry_ids AS uuid[]), CAST(:ks AS integer[])) AS v(entry_id, k)
WHERE s.entry_id = ANY(CAST(:entry_ids AS uuid[])) AND s.entry_id = v.entry_id AND s.k = v.k
RETURNING s.blob_key
"""
_DELETE_ENTRY_STATES = (
    "DELETE FROM cache_states WHERE entry_id = ANY(CAST(:ids AS uuid[])) RETURNING blob_key"
)
_DELETE_ENTRIES = (
    "DELETE FROM cache_entries WHERE id = ANY(CAST(:ids AS uuid[])) RETURNING id, final_latent_key"
)


def apply_plan(session: Session, plan: EvictionPlan) -> Outbox:
    """Delete the planned states' rows and the whole-entry victims' rows (their states first), and
    record their blobs in the outbox: three statements, each with array parameters whatever the plan's
    size. A DELETE touches no index (a row's index entries wait for vacuum), where marking the entries
    dirty re-inserted each into the HNSW graph."""
    holes = {
        "entry_ids": [victim.entry_id for victim in plan.states],
        "ks": [victim.k for victim in plan.states],
    }
    keys: list[str] = list(session.scalars(text(_DELETE_STATES), holes).all()) if plan.states else []
    prefixes: list[str] = []
    if plan.entries:
        ids = {"ids": list(plan.entries)}
        keys.extend(session.scalars(text(_DELETE_ENTRY_STATES), ids).all())
        gone = session.execute(text(_DELETE_ENTRIES), ids).all()
        prefixes.extend(entry_prefix(entry_id) for entry_id, _ in gone)
        keys.extend(key for _, key in gone if key is not None)
    under = tuple(prefixes)
    return record_deletions(session, [key for key in keys if not key.startswith(under)], prefixes)


def record_deletions(session: Session, keys: list[str], prefixes: list[str]) -> Outbox:
    """Write these blob keys and prefixes to the outbox (one blob_deletions row) in the caller's
    transaction."""
    if not keys and not prefixes:
        return Outbox([], keys, prefixes)
    row = insert(BlobDeletion).values(keys=keys, prefixes=prefixes).returning(BlobDeletion.id)
    return Outbox([int(session.scalar(row) or 0)], keys, prefixes)


def pending_deletions(session: Session, *, older_than_s: float, limit: int) -> Outbox:
    """Outbox rows left behind (by a pass that stopped after its commit), oldest first, merged."""
    rows = session.execute(
        select(BlobDeletion.id, BlobDeletion.keys, BlobDeletion.prefixes)
        .where(BlobDeletion.created_at < func.now() - timedelta(seconds=older_than_s))
        .order_by(BlobDeletion.id)
        .limit(limit)
    ).all()
    keys = [key for _, row_keys, _ in rows for key in row_keys]
    prefixes = [prefix for _, _, row_prefixes in rows for prefix in row_prefixes]
    return Outbox([row_id for row_id, _, _ in rows], keys, prefixes)


def forget_deletions(session: Session, ids: list[int]) -> None:
    """The store has deleted these outbox rows' blobs."""
    session.execute(delete(BlobDeletion).where(BlobDeletion.id.in_(ids)))


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
    """Every scope that holds bytes (cache_scope_bytes: one row a scope, not a scan of the entries)."""
    return list(
        session.scalars(
            select(CacheScopeBytes.scope).where(CacheScopeBytes.bytes > 0).order_by(CacheScopeBytes.scope)
        ).all()
    )
