"""The eviction pass: keep a cache scope within its byte budget (Settings.cache_budget_bytes, per scope;
a video scope's is Settings.video_cache_budget_bytes, kept by LRBU: scope_budget).

A pass, under a per-scope advisory lock:
1. reads the scope's bytes (cache_scope_bytes, kept by triggers: one row) and finds its candidate
   entries (db.eviction.candidate_ids): under FIFO, LRU and LFU the prefix of the policy's exact
   ranking, read in index order; under LCBFU and LRBU, whose scores move with the clock, a random
   sample of the scope holding Settings.eviction_sample_factor x the bytes to free (Redis'
   approximated LRU), or the whole scope ranked in SQL when it is small; then asks the pure planner
   (plan_eviction) which of their units to forget. A pass costs in proportion to what it frees, not
   to the scope;
2. deletes the evicted states' rows and the rows of entries left without states, records their blobs
   in the outbox (blob_deletions) in the same transaction, and COMMITS;
3. only then deletes those blobs, and then their outbox rows;
4. removes the scope's dirty entries (a deleted job's, db/outputs.py): blobs first, then rows.

Why this order never breaks a job: a job routed to an evicted state either finds no row or finds a
row whose blob is already gone; db.cache.get_state / read_state_blob turn both into SourceVanished,
and the job runs as a miss. A crash after step 2 leaves outbox rows, which the next beat run drains
(drain_deletions); a crash inside step 4 leaves a dirty row, which the next pass removes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from core.scopes import is_video_scope
from core.settings import Settings
from core.usage import EvictionPlan
from core.vocabulary import EvictionPolicyName, HitPolicy
from db import eviction as eviction_sql
from db import scope_bytes
from db.blobs.base import BlobStore
from db.blobs.keys import entry_prefix
from db.engine import session_scope
from jobs.policies.eviction import plan_eviction
from jobs.policies.k_selection import configured_table

EVICTION_HEADROOM = 0.02
"""A pass that must run frees this fraction of the budget beyond what is needed, so the inserts that
follow find room without paying a pass each. NIRVANA 5.4 evicts |K| states before every insertion;
batching amortises the candidate search over many victims (our choice, not the papers')."""


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
    candidates_read: int = 0  # rows the candidate search read (db.eviction.Candidates.rows_read)
    sampled: bool = False  # victims were ranked within a random sample of the scope

    @property
    def fits(self) -> bool:
        return self.bytes_after + self.incoming_bytes <= self.budget_bytes


VIDEO_EVICTION_POLICY = EvictionPolicyName.LRBU
"""Video scopes are kept by LRBU (FlexCache 4.2.3: accesses x steps saved / (bytes x time since the last
access), over single states), whatever REPRISE_EVICTION_POLICY names for images."""


def scope_budget(settings: Settings, scope: str) -> tuple[int, EvictionPolicyName]:
    """A scope's byte budget and eviction policy: a video scope's are settings'
    video_cache_budget_bytes and VIDEO_EVICTION_POLICY; an image scope's, the configured ones."""
    if is_video_scope(scope):
        return settings.video_cache_budget_bytes, VIDEO_EVICTION_POLICY
    return settings.cache_budget_bytes, settings.eviction_policy


def final_latent_k(settings: Settings) -> int:
    """Steps one use of a state-less entry saves, for scoring it (see jobs.policies.eviction).

    Under refine (MoDM) a final latent serves any k: value it like the table's smallest k.
    Under resume (NIRVANA) a hit needs a state: a state-less entry saves nothing.
    """
    if settings.hit_policy is HitPolicy.REFINE:
        return min(configured_table(settings).ks)
    return 0


def remove_dirty_entries(settings: Settings, blobs: BlobStore, *, scope: str) -> tuple[int, int]:
    """Remove the scope's dirty entries: blobs first, then rows.

    Returns (entries removed, blob keys deleted)."""
    with session_scope(settings) as session:
        ids, stray_keys = eviction_sql.dirty_entries(session, scope=scope)
    if not ids:
        return 0, 0
    deleted = sum(blobs.delete_prefix(entry_prefix(entry_id)) for entry_id in ids)
    prefixes = tuple(entry_prefix(entry_id) for entry_id in ids)
    outside = [key for key in stray_keys if not key.startswith(prefixes)]  # keys laid out elsewhere
    blobs.delete(outside)
    with session_scope(settings) as session:
        removed = eviction_sql.delete_dirty_entries(session, ids)
    return removed, deleted + len(outside)


def delete_blobs(settings: Settings, blobs: BlobStore, outbox: eviction_sql.Outbox) -> int:
    """Delete an outbox's blobs (their rows are gone and committed), then its rows; the keys deleted."""
    if not outbox.ids:
        return 0
    blobs.delete(outbox.keys)
    deleted = len(outbox.keys) + sum(blobs.delete_prefix(prefix) for prefix in outbox.prefixes)
    with session_scope(settings) as session:
        eviction_sql.forget_deletions(session, outbox.ids)
    return deleted


OUTBOX_GRACE_S = 300.0
"""Outbox rows older than this were left by a pass that stopped between its commit and its deletions
(a pass deletes its own within seconds); drain_deletions finishes them."""


def drain_deletions(settings: Settings, blobs: BlobStore, *, batch: int = 16) -> int:
    """Delete the blobs of outbox rows (one a pass) left behind by crashed passes, `batch` rows at a
    time; the keys deleted."""
    total = 0
    while True:
        with session_scope(settings) as session:
            outbox = eviction_sql.pending_deletions(session, older_than_s=OUTBOX_GRACE_S, limit=batch)
        total += delete_blobs(settings, blobs, outbox)
        if len(outbox.ids) < batch:
            return total


def _plan(
    session: Session,
    settings: Settings,
    scope: str,
    policy: EvictionPolicyName,
    to_free: int,
    now: datetime,
    final_k: int,
    rng: random.Random | None,
) -> tuple[eviction_sql.Candidates, EvictionPlan]:
    """The pass's candidates (db.eviction.candidate_ids) and the pure planner's victims among them."""
    found = eviction_sql.candidate_ids(
        session,
        scope,
        policy,
        to_free,
        now,
        final_k,
        sample_factor=settings.eviction_sample_factor,
        exact_entries=settings.eviction_exact_entries,
        rng=rng,
    )
    usage = found.usage if found.usage is not None else eviction_sql.load_usage(session, found.entry_ids)
    return found, plan_eviction(usage, to_free, policy, now, final_latent_k=final_k)


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
    rng: random.Random | None = None,
) -> EvictionReport:
    """One pass: when `scope` holds more than `budget_bytes - incoming_bytes` (defaults: the scope's
    budget and policy, scope_budget), evict down to that minus `headroom` x budget; then remove its
    dirty entries.
    `now` (default: the database's clock) feeds LCBFU and LRBU; `rng` draws their samples. Commits its
    own transactions; safe to run concurrently with lookups, uses, inserts and other passes (one pass
    per scope at a time).
    """
    default_budget, default_policy = scope_budget(settings, scope)
    budget = default_budget if budget_bytes is None else budget_bytes
    chosen = default_policy if policy is None else policy
    final_k = final_latent_k(settings)
    with session_scope(settings) as session:
        eviction_sql.lock_scope(session, scope)
        live, dirty = scope_bytes.scope_bytes_by_state(session, scope=scope)
        to_free = live + incoming_bytes - budget  # dirty entries leave below, whatever the plan
        outbox = eviction_sql.Outbox([], [], [])
        plan = EvictionPlan((), 0)
        found = eviction_sql.Candidates([], 0)
        if to_free > 0:
            to_free += int(headroom * budget)
            clock = now if now is not None else eviction_sql.db_now(session)
            found, plan = _plan(session, settings, scope, chosen, to_free, clock, final_k, rng)
            outbox = eviction_sql.apply_plan(session, plan)
    # The rows' deletion is committed: from here on no lookup finds these states or entries.
    deleted_blobs = delete_blobs(settings, blobs, outbox)
    removed, deleted = remove_dirty_entries(settings, blobs, scope=scope)
    with session_scope(settings) as session:
        after = scope_bytes.scope_bytes(session, scope=scope)
    return EvictionReport(
        scope=scope,
        policy=chosen,
        budget_bytes=budget,
        incoming_bytes=incoming_bytes,
        bytes_before=live + dirty,
        bytes_after=after,
        states_evicted=len(plan.states),
        entries_removed=len(outbox.prefixes) + removed,
        blob_keys_deleted=deleted_blobs + deleted,
        candidates_read=found.rows_read,
        sampled=found.sampled,
    )


def ensure_room(
    settings: Settings,
    blobs: BlobStore,
    *,
    scope: str,
    incoming_bytes: int,
    headroom: float = EVICTION_HEADROOM,
    budget_bytes: int | None = None,
    policy: EvictionPolicyName | None = None,
) -> EvictionReport:
    """Before inserting `incoming_bytes` into `scope`: evict until they fit the budget (NIRVANA 5.4:
    "every insertion is preceded by an eviction" once the cache is full). A scope already with room
    costs one budget query. `report.fits` is False only when the incoming bytes alone pass the budget.
    `budget_bytes` and `policy` default to the scope's (scope_budget).
    """
    default_budget, default_policy = scope_budget(settings, scope)
    budget = default_budget if budget_bytes is None else budget_bytes
    chosen = default_policy if policy is None else policy
    with session_scope(settings) as session:
        used = scope_bytes.scope_bytes(session, scope=scope)
    if used + incoming_bytes <= budget:
        return EvictionReport(
            scope=scope,
            policy=chosen,
            budget_bytes=budget,
            incoming_bytes=incoming_bytes,
            bytes_before=used,
            bytes_after=used,
            states_evicted=0,
            entries_removed=0,
            blob_keys_deleted=0,
        )
    return evict_scope(
        settings,
        blobs,
        scope=scope,
        incoming_bytes=incoming_bytes,
        headroom=headroom,
        budget_bytes=budget,
        policy=chosen,
    )


def evict_all_scopes(settings: Settings, blob_store: BlobStore) -> list[EvictionReport]:
    """One eviction pass over every scope (NIRVANA 5.4's cache-maintainer, run in the background)."""
    drain_deletions(settings, blob_store)
    with session_scope(settings) as session:
        scopes = eviction_sql.cache_scopes(session)
    return [evict_scope(settings, blob_store, scope=scope) for scope in scopes]
