"""Eviction at scale: FIFO, LRU and LFU read their exact ranking in index order, chunk by
chunk, and keep the pure planner's victims (state-less entries included); LCBFU and LRBU rank a random
sample on large scopes, free what they must, spare the valuable units, and read a bounded number of
rows."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from core.scopes import tenant_scope
from core.settings import Settings
from core.usage import EntryUsage, StateUsage
from core.vocabulary import EntryState, EvictionPolicyName
from db import cache, scope_bytes
from db import eviction as eviction_sql
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.models import CacheEntry, CacheState
from jobs.passes.eviction import evict_scope
from jobs.policies.eviction import plan_eviction

pytestmark = pytest.mark.integration

KS = (5, 10, 15, 20, 25)
T0 = datetime(2025, 6, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=3)


def bulk_fill(
    settings: Settings, scope: str, n: int, rng: np.random.Generator, *, valuable: set[int] | None = None
) -> list[uuid.UUID]:
    """n entries with random counters and times; entry i has no states when i % 7 == 3. With
    `valuable`, those entries' states are used 1000 times and every other state once (bimodal)."""
    ids = [uuid.uuid4() for _ in range(n)]
    entries, states = [], []
    for i, entry_id in enumerate(ids):
        created = T0 + timedelta(minutes=int(rng.integers(0, 600)))
        entries.append(
            {
                "id": entry_id,
                "scope": scope,
                "model_family": "tiny-sd",
                "prompt": f"p{i}",
                "text_embedding": rng.normal(size=settings.text_embedding_dim).astype(np.float32),
                "bytes": int(rng.choice([500, 1000])),
                "steps": 50,
                "access_count": int(rng.integers(1, 6)),
                "created_at": created,
                "last_access_at": created + timedelta(minutes=int(rng.integers(0, 600))),
                "state": EntryState.LIVE.value,
            }
        )
        for k in () if i % 7 == 3 else KS:
            count = int(rng.integers(0, 4)) if valuable is None else (1000 if i in valuable else 1)
            states.append(
                {
                    "entry_id": entry_id,
                    "k": k,
                    "blob_key": f"x/{entry_id}/{k}",
                    "bytes": int(rng.choice([50, 100, 200])),
                    "access_count": count,
                    "created_at": created,
                    "last_access_at": created + timedelta(minutes=int(rng.integers(0, 600))),
                }
            )
    with session_scope(settings) as session:
        cache.bulk_insert(session, entries, states)
    return ids


def units(settings: Settings, scope: str) -> set[tuple[uuid.UUID, int]]:
    with session_scope(settings) as session:
        return {
            (e, k)
            for e, k in session.execute(
                select(CacheState.entry_id, CacheState.k).where(CacheState.scope == scope)
            )
        }


@pytest.mark.parametrize("policy", [EvictionPolicyName.FIFO, EvictionPolicyName.LRU, EvictionPolicyName.LFU])
def test_index_order_keeps_the_exact_victims(
    db_settings: Settings, tmp_path: Path, policy: EvictionPolicyName, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eviction_sql, "FIRST_CHUNK", 4)  # many keyset pages, not one read
    scope = tenant_scope(uuid.uuid4())
    ids = bulk_fill(db_settings, scope, 120, np.random.default_rng(7))
    with session_scope(db_settings) as session:
        usage = eviction_sql.load_usage(session, ids)
        live, _ = scope_bytes.scope_bytes_by_state(session, scope=scope)
        assert live == scope_bytes.recount_scope_bytes(session, scope=scope)
    budget = int(live * 0.85)
    expected = plan_eviction(usage, live - budget, policy, NOW, final_latent_k=0)
    before = units(db_settings, scope)
    settings = db_settings.model_copy(update={"cache_budget_bytes": budget, "eviction_policy": policy})
    report = evict_scope(settings, LocalBlobStore(tmp_path), scope=scope, now=NOW, headroom=0.0)

    assert before - units(db_settings, scope) >= {(v.entry_id, v.k) for v in expected.states}
    with session_scope(db_settings) as session:
        gone = set(ids) - {u.entry_id for u in eviction_sql.load_usage(session, ids)}
    assert gone == set(expected.entries)
    assert report.states_evicted == len(expected.states)
    assert report.bytes_after == live - expected.bytes_freed
    assert not report.sampled and report.candidates_read < len(before) // 2


@pytest.mark.parametrize("policy", [EvictionPolicyName.LCBFU, EvictionPolicyName.LRBU])
def test_a_sampled_pass_spares_the_valuable_half(
    db_settings: Settings, tmp_path: Path, policy: EvictionPolicyName
) -> None:
    scope = tenant_scope(uuid.uuid4())
    valuable = set(range(0, 400, 2))
    ids = bulk_fill(db_settings, scope, 400, np.random.default_rng(3), valuable=valuable)
    with session_scope(db_settings) as session:
        live, _ = scope_bytes.scope_bytes_by_state(session, scope=scope)
    budget = live - live // 20  # free 5%
    settings = db_settings.model_copy(
        update={
            "cache_budget_bytes": budget,
            "eviction_policy": policy,
            "eviction_sample_factor": 5,
            "eviction_exact_entries": 100,
        }
    )
    before = units(db_settings, scope)
    report = evict_scope(
        settings, LocalBlobStore(tmp_path), scope=scope, now=NOW, headroom=0.0, rng=random.Random(11)
    )

    assert report.sampled
    assert report.bytes_after <= budget
    evicted = before - units(db_settings, scope)
    assert evicted and not {entry_id for entry_id, _ in evicted} & {ids[i] for i in valuable}
    # A sample of ~5 x 5% of the bytes (a quarter of the scope), not the scope: rows read are the
    # sampled entries and their states (index ranges), well under the scope's entries and units.
    assert report.candidates_read < 0.4 * (len(ids) + len(before))


def test_a_small_scope_is_ranked_whole(db_settings: Settings, tmp_path: Path) -> None:
    scope = tenant_scope(uuid.uuid4())
    bulk_fill(db_settings, scope, 50, np.random.default_rng(5))
    with session_scope(db_settings) as session:
        live, _ = scope_bytes.scope_bytes_by_state(session, scope=scope)
    settings = db_settings.model_copy(update={"cache_budget_bytes": live - 1, "eviction_exact_entries": 51})
    report = evict_scope(settings, LocalBlobStore(tmp_path), scope=scope, now=NOW, headroom=0.0)
    assert not report.sampled and report.states_evicted >= 1


def test_states_inherit_their_entry_scope(db_settings: Settings) -> None:
    scope = tenant_scope(uuid.uuid4())
    (entry_id,) = bulk_fill(db_settings, scope, 1, np.random.default_rng(1))
    with session_scope(db_settings) as session:
        scopes = set(session.scalars(select(CacheState.scope).where(CacheState.entry_id == entry_id)))
    assert scopes == {scope}


def test_a_sample_reads_every_state_of_its_entries(db_settings: Settings) -> None:
    """A sample comes from two index ranges (migration 0012): each sampled entry arrives with exactly the
    states and counters that load_usage reads from the tables, state-less entries included."""
    scope = tenant_scope(uuid.uuid4())
    ids = bulk_fill(db_settings, scope, 300, np.random.default_rng(5))
    with session_scope(db_settings) as session:
        keys = session.execute(
            select(CacheState.sample_key, CacheEntry.sample_key)
            .join(CacheEntry, CacheEntry.id == CacheState.entry_id)
            .where(CacheState.scope == scope)
        ).all()
        live, _ = scope_bytes.scope_bytes_by_state(session, scope=scope)
        found = eviction_sql.candidate_ids(
            session,
            scope,
            EvictionPolicyName.LRBU,
            live // 20,
            NOW,
            0,
            sample_factor=5,
            exact_entries=10,
            rng=random.Random(2),
        )
        assert found.usage is not None
        loaded = {entry.entry_id: entry for entry in eviction_sql.load_usage(session, found.entry_ids)}

    assert keys and all(state_key == entry_key for state_key, entry_key in keys)
    assert found.sampled and 0 < len(found.usage) < len(ids)
    assert any(not entry.states for entry in found.usage)  # i % 7 == 3 has none

    def by_k(entry: EntryUsage) -> list[StateUsage]:
        return sorted(entry.states, key=lambda state: state.k)

    for entry in found.usage:
        reference = loaded[entry.entry_id]
        assert (entry.bytes, entry.created_at, by_k(entry)) == (
            reference.bytes,
            reference.created_at,
            by_k(reference),
        )
        if not entry.states:  # scored as a unit of its own: its counters are read
            assert (entry.access_count, entry.last_access_at) == (
                reference.access_count,
                reference.last_access_at,
            )
