"""Eviction passes on the real database with a local blob store: down to budget, rows and blobs gone
together, holes, dirty entries, FIFO whole entries, ensure_room, and recovery from a crashed pass."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import delete, select, update

from core.errors import SourceVanished
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import EntryState, EvictionPolicyName
from db import cache, scope_bytes
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.eviction import load_usage
from db.models import CacheEntry, CacheState
from jobs.passes.eviction import ensure_room, evict_scope, remove_dirty_entries
from jobs.policies.eviction import plan_eviction

pytestmark = pytest.mark.integration

FINAL_BYTES = 1000
STATE_BYTES = 100
KS = (5, 10, 15, 20, 25)
ENTRY_BYTES = FINAL_BYTES + STATE_BYTES * len(KS)  # 1500
T0 = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.fixture
def blobs(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def scope() -> str:
    return tenant_scope(uuid.uuid4())


def fill(
    settings: Settings,
    blobs: LocalBlobStore,
    scope: str,
    n: int,
    *,
    accesses: Sequence[dict[int, int]] | None = None,
    with_blobs: bool = True,
) -> list[uuid.UUID]:
    """n entries, created one minute apart from T0, with blobs of their declared sizes.
    accesses[i] maps k -> access count for entry i."""
    rng = np.random.default_rng(len(scope))
    ids: list[uuid.UUID] = []
    with session_scope(settings) as session:
        for i in range(n):
            entry_id = uuid.uuid4()
            if with_blobs:
                blobs.put(keys.final_latent_key(entry_id), b"f" * FINAL_BYTES)
                for k in KS:
                    blobs.put(keys.state_key(entry_id, k), b"s" * STATE_BYTES)
            cache.insert_entry(
                session,
                entry_id=entry_id,
                scope=scope,
                model_family="tiny-sd",
                prompt=f"prompt {i}",
                text_embedding=rng.normal(size=settings.text_embedding_dim),
                image_embedding=None,
                final_latent_key=keys.final_latent_key(entry_id),
                final_bytes=FINAL_BYTES,
                steps=50,
                states=[cache.NewState(k, keys.state_key(entry_id, k), STATE_BYTES) for k in KS],
            )
            when = T0 + timedelta(minutes=i)
            session.execute(
                update(CacheEntry)
                .where(CacheEntry.id == entry_id)
                .values(created_at=when, last_access_at=when)
            )
            session.execute(
                update(CacheState)
                .where(CacheState.entry_id == entry_id)
                .values(created_at=when, last_access_at=when)
            )
            for k, count in (accesses[i] if accesses else {}).items():
                session.execute(
                    update(CacheState)
                    .where(CacheState.entry_id == entry_id, CacheState.k == k)
                    .values(access_count=count)
                )
            ids.append(entry_id)
    return ids


def rows(settings: Settings, scope: str) -> dict[uuid.UUID, tuple[str, set[int]]]:
    with session_scope(settings) as session:
        entries = session.execute(
            select(CacheEntry.id, CacheEntry.state).where(CacheEntry.scope == scope)
        ).all()
        states = session.execute(
            select(CacheState.entry_id, CacheState.k)
            .join(CacheEntry, CacheEntry.id == CacheState.entry_id)
            .where(CacheEntry.scope == scope)
        ).all()
    return {entry_id: (state, {k for eid, k in states if eid == entry_id}) for entry_id, state in entries}


def with_budget(settings: Settings, budget: int, policy: EvictionPolicyName) -> Settings:
    return settings.model_copy(update={"cache_budget_bytes": budget, "eviction_policy": policy})


def test_lcbfu_pass_evicts_low_benefit_states_and_deletes_their_blobs(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    # Entries 0 and 1 were used (entry 1 mostly at k=5); entry 2 only by its own generation.
    ids = fill(
        db_settings,
        blobs,
        scope,
        3,
        accesses=[{5: 10, 10: 10, 15: 10, 20: 10, 25: 10}, {5: 30, 10: 10, 15: 10, 20: 10, 25: 10}, {}],
    )
    settings = with_budget(db_settings, 3 * ENTRY_BYTES - 700, EvictionPolicyName.LCBFU)
    report = evict_scope(settings, blobs, scope=scope, headroom=0.0)

    assert report.bytes_before == 3 * ENTRY_BYTES
    assert report.bytes_after <= settings.cache_budget_bytes
    after = rows(db_settings, scope)
    # Entry 2 (scores 1 x k <= 25, the others >= 50) loses its 5 states (500 bytes) and then goes
    # whole (1000 more): 1500 >= 700.
    assert ids[2] not in after
    assert after[ids[0]] == ("live", set(KS))
    assert after[ids[1]] == ("live", set(KS))
    assert report.entries_removed == 1 and report.states_evicted == 5
    assert report.bytes_after == 2 * ENTRY_BYTES
    assert list(blobs.list(keys.entry_prefix(ids[2]))) == []
    assert len(list(blobs.list(keys.entry_prefix(ids[0])))) == 6


def test_holes_are_left_where_lcbfu_scores_lowest(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    ids = fill(
        db_settings,
        blobs,
        scope,
        2,
        accesses=[{5: 200, 10: 2, 15: 50, 20: 3, 25: 100}, {5: 90, 10: 90, 15: 90, 20: 90, 25: 90}],
    )
    # scores: entry0 k5=1000 k10=20 k15=750 k20=60 k25=2500; entry1 all >= 450
    settings = with_budget(db_settings, 2 * ENTRY_BYTES - 150, EvictionPolicyName.LCBFU)
    report = evict_scope(settings, blobs, scope=scope, headroom=0.0)
    after = rows(db_settings, scope)
    assert after[ids[0]] == ("live", {5, 15, 25})  # k10 (20) and k20 (60) became holes
    assert after[ids[1]] == ("live", set(KS))
    assert report.states_evicted == 2 and report.entries_removed == 0
    assert not blobs.exists(keys.state_key(ids[0], 10))
    assert not blobs.exists(keys.state_key(ids[0], 20))
    assert blobs.exists(keys.state_key(ids[0], 15))
    with session_scope(db_settings) as session:
        embedding = session.scalar(select(CacheEntry.text_embedding).where(CacheEntry.id == ids[0]))
        assert embedding is not None
        found = cache.lookup(
            session,
            query_embedding=embedding,
            mode=db_settings.lookup_mode,
            scopes=(scope,),
            model_family="tiny-sd",
            ef_search=40,
        )
    assert found is not None and found.entry_id == ids[0]
    assert found.stored_ks == (5, 15, 25)


def test_fifo_removes_the_oldest_entries_whole(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    ids = fill(db_settings, blobs, scope, 4, accesses=[{5: 1000}, {}, {}, {}])
    settings = with_budget(db_settings, 2 * ENTRY_BYTES + 10, EvictionPolicyName.FIFO)
    report = evict_scope(settings, blobs, scope=scope, headroom=0.0)
    after = rows(db_settings, scope)
    assert set(after) == {ids[2], ids[3]}  # MoDM 5.4: oldest first, use does not matter
    assert report.entries_removed == 2 and report.states_evicted == 0
    assert report.bytes_after == 2 * ENTRY_BYTES
    for gone in ids[:2]:
        assert list(blobs.list(keys.entry_prefix(gone))) == []


def test_lru_and_lrbu_passes_reach_the_budget(db_settings: Settings, blobs: LocalBlobStore) -> None:
    for policy in (EvictionPolicyName.LRU, EvictionPolicyName.LRBU, EvictionPolicyName.LFU):
        scope = tenant_scope(uuid.uuid4())
        ids = fill(db_settings, blobs, scope, 3)
        settings = with_budget(db_settings, 2 * ENTRY_BYTES, policy)
        report = evict_scope(settings, blobs, scope=scope, headroom=0.0)
        assert report.bytes_after <= 2 * ENTRY_BYTES, policy
        if policy is EvictionPolicyName.LRU:
            assert ids[0] not in rows(db_settings, scope)  # least recently used entry went first


def test_a_pass_that_must_run_frees_headroom_too(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    fill(db_settings, blobs, scope, 4)
    budget = 4 * ENTRY_BYTES - 1  # one byte over
    settings = with_budget(db_settings, budget, EvictionPolicyName.LRU)
    report = evict_scope(settings, blobs, scope=scope, headroom=0.25)
    assert report.bytes_after <= budget - int(0.25 * budget)  # without headroom: one state, 5900
    untouched = evict_scope(settings, blobs, scope=scope, headroom=0.25)  # within budget: no pass
    assert untouched.states_evicted == untouched.entries_removed == 0


def test_a_scope_within_budget_is_left_alone(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    ids = fill(db_settings, blobs, scope, 2)
    other = tenant_scope(uuid.uuid4())
    fill(db_settings, blobs, other, 3)
    settings = with_budget(db_settings, 2 * ENTRY_BYTES, EvictionPolicyName.LCBFU)
    report = evict_scope(settings, blobs, scope=scope, headroom=0.0)
    assert report.states_evicted == report.entries_removed == 0
    assert set(rows(db_settings, scope)) == set(ids)
    assert len(rows(db_settings, other)) == 3  # budgets are per scope


def test_ensure_room_evicts_only_when_the_insert_would_pass_the_budget(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    fill(db_settings, blobs, scope, 2)
    settings = with_budget(db_settings, 3 * ENTRY_BYTES, EvictionPolicyName.LCBFU)
    room = ensure_room(settings, blobs, scope=scope, incoming_bytes=ENTRY_BYTES)
    assert room.fits and room.states_evicted == 0 and len(rows(db_settings, scope)) == 2

    tight = ensure_room(settings, blobs, scope=scope, incoming_bytes=ENTRY_BYTES + 1)
    assert tight.fits and tight.states_evicted >= 1
    assert tight.bytes_after + ENTRY_BYTES + 1 <= settings.cache_budget_bytes

    too_big = ensure_room(settings, blobs, scope=scope, incoming_bytes=4 * ENTRY_BYTES)
    assert not too_big.fits and too_big.bytes_after == 0 and rows(db_settings, scope) == {}


def test_a_job_holding_an_evicted_state_gets_source_vanished(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    (entry_id,) = fill(db_settings, blobs, scope, 1)
    with session_scope(db_settings) as job_session:
        routed = cache.get_state(job_session, entry_id=entry_id, k=25)  # admitted before the eviction
        evict_scope(with_budget(db_settings, 0, EvictionPolicyName.LCBFU), blobs, scope=scope, headroom=0.0)
        with pytest.raises(SourceVanished):
            cache.read_state_blob(job_session, blobs, entry_id=entry_id, k=25)
        assert not blobs.exists(routed.blob_key)
    with session_scope(db_settings) as session, pytest.raises(SourceVanished):
        cache.get_state(session, entry_id=entry_id, k=25)


def test_a_pass_removes_dirty_entries_left_by_a_crashed_pass(
    db_settings: Settings, blobs: LocalBlobStore, scope: str
) -> None:
    ids = fill(db_settings, blobs, scope, 2)
    with session_scope(db_settings) as session:
        session.execute(
            update(CacheEntry).where(CacheEntry.id == ids[0]).values(state=EntryState.DIRTY.value)
        )
    removed, deleted = remove_dirty_entries(db_settings, blobs, scope=scope)
    assert (removed, deleted) == (1, 1 + len(KS))
    assert set(rows(db_settings, scope)) == {ids[1]}
    assert list(blobs.list(keys.entry_prefix(ids[0]))) == []
    assert remove_dirty_entries(db_settings, blobs, scope=scope) == (0, 0)


@pytest.mark.parametrize("policy", list(EvictionPolicyName))
def test_a_pass_equals_the_pure_planner_over_the_whole_scope(
    db_settings: Settings, blobs: LocalBlobStore, policy: EvictionPolicyName
) -> None:
    """The pass ranks in SQL and plans over the top candidates only; the result must be the plan the
    pure policy makes from every state of the scope (same scores, same tie-breaks, same holes)."""
    rng = np.random.default_rng(sorted(EvictionPolicyName).index(policy))
    scope = tenant_scope(uuid.uuid4())
    ids = fill(db_settings, blobs, scope, 30, with_blobs=False)
    now = T0 + timedelta(days=2)
    with session_scope(db_settings) as session:
        for entry_id in ids:
            for k in KS:
                if rng.random() < 0.2:  # some holes already
                    session.execute(
                        delete(CacheState).where(CacheState.entry_id == entry_id, CacheState.k == k)
                    )
                    continue
                session.execute(
                    update(CacheState)
                    .where(CacheState.entry_id == entry_id, CacheState.k == k)
                    .values(
                        access_count=int(rng.integers(0, 4)),  # small counts: many ties to break
                        bytes=int(rng.choice([50, 100, 200])),
                        last_access_at=T0 + timedelta(hours=int(rng.integers(0, 24))),
                    )
                )
        usage = load_usage(session, ids)
    with session_scope(db_settings) as session:
        live, _ = scope_bytes.scope_bytes_by_state(session, scope=scope)
    budget = int(live * 0.6)
    expected = plan_eviction(usage, live - budget, policy, now, final_latent_k=0)

    before = rows(db_settings, scope)
    report = evict_scope(with_budget(db_settings, budget, policy), blobs, scope=scope, now=now, headroom=0.0)
    after = rows(db_settings, scope)

    evicted_states = {
        (entry_id, k)
        for entry_id, (_, ks) in before.items()
        for k in ks
        if k not in after.get(entry_id, ("", set()))[1]
    }
    expected_states = {(v.entry_id, v.k) for v in expected.states}
    if policy is EvictionPolicyName.FIFO:
        assert expected_states == set()
    else:
        assert evicted_states == expected_states
    assert set(before) - set(after) == set(expected.entries)
    assert report.bytes_after == live - expected.bytes_freed
    assert report.bytes_after <= budget
