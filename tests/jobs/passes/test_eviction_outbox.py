"""Per-scope byte counters and the blob-deletion outbox (migration 0011): the counters equal a recount
of the rows after every kind of change, and an eviction pass that stops between its commit and its
blob deletions leaks nothing (the outbox is drained)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update

from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import EntryState, EvictionPolicyName
from db import cache, scope_bytes
from db import eviction as eviction_sql
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.models import BlobDeletion, CacheEntry, CacheState
from jobs.passes import eviction as eviction_pass
from tests.jobs.passes.test_eviction import ENTRY_BYTES, KS, fill, rows, with_budget

pytestmark = pytest.mark.integration


def counted(settings: Settings, scope: str) -> tuple[int, int]:
    """(the counter, a recount of the rows)."""
    with session_scope(settings) as session:
        return scope_bytes.scope_bytes(session, scope=scope), scope_bytes.recount_scope_bytes(
            session, scope=scope
        )


def test_the_counter_follows_inserts_updates_deletes_and_cascades(
    db_settings: Settings, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path)
    mine, other = tenant_scope(uuid.uuid4()), tenant_scope(uuid.uuid4())
    ids = fill(db_settings, blobs, mine, 4, with_blobs=False)
    fill(db_settings, blobs, other, 2, with_blobs=False)
    assert counted(db_settings, mine) == (4 * ENTRY_BYTES, 4 * ENTRY_BYTES)
    with session_scope(db_settings) as session:
        session.execute(update(CacheState).where(CacheState.entry_id == ids[0]).values(bytes=7))
        session.execute(update(CacheEntry).where(CacheEntry.id == ids[1]).values(bytes=3))
        session.execute(delete(CacheState).where(CacheState.entry_id == ids[2], CacheState.k == KS[0]))
        session.execute(delete(CacheEntry).where(CacheEntry.id == ids[3]))  # its states by cascade
        session.execute(update(CacheEntry).where(CacheEntry.id == ids[1]).values(access_count=9))
    total, recount = counted(db_settings, mine)
    assert total == recount and total < 3 * ENTRY_BYTES
    with session_scope(db_settings) as session:
        session.execute(update(CacheEntry).where(CacheEntry.id == ids[0]).values(bytes=5))
        session.rollback()  # a rolled-back change leaves the counter alone
    assert counted(db_settings, mine) == (total, total)
    assert counted(db_settings, other) == (2 * ENTRY_BYTES, 2 * ENTRY_BYTES)
    with session_scope(db_settings) as session:
        cache.drop_scope(session, mine)
    assert counted(db_settings, mine) == (0, 0)


def test_a_pass_deletes_victims_at_once_without_marking_them_dirty(
    db_settings: Settings, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path)
    scope = tenant_scope(uuid.uuid4())
    ids = fill(db_settings, blobs, scope, 4)
    settings = with_budget(db_settings, 2 * ENTRY_BYTES, EvictionPolicyName.FIFO)
    report = eviction_pass.evict_scope(settings, blobs, scope=scope, headroom=0.0)
    assert report.entries_removed == 2 and report.blob_keys_deleted == 2 * (1 + len(KS))
    assert set(rows(db_settings, scope)) == set(ids[2:])
    assert all(state == EntryState.LIVE.value for state, _ in rows(db_settings, scope).values())
    assert report.bytes_after == 2 * ENTRY_BYTES == counted(db_settings, scope)[1]
    assert list(blobs.list(keys.entry_prefix(ids[0]))) == []
    with session_scope(db_settings) as session:
        assert session.scalar(select(func.count()).select_from(BlobDeletion)) == 0


def test_blobs_of_a_pass_that_stopped_after_its_commit_are_drained(
    db_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = LocalBlobStore(tmp_path)
    scope = tenant_scope(uuid.uuid4())
    ids = fill(db_settings, blobs, scope, 3)
    settings = with_budget(db_settings, ENTRY_BYTES, EvictionPolicyName.FIFO)

    def crash(*_: object) -> int:
        raise RuntimeError("the worker died here")

    monkeypatch.setattr(eviction_pass, "delete_blobs", crash)
    with pytest.raises(RuntimeError):
        eviction_pass.evict_scope(settings, blobs, scope=scope, headroom=0.0)
    monkeypatch.undo()
    assert set(rows(db_settings, scope)) == {ids[2]}  # the rows went with the commit
    assert list(blobs.list(keys.entry_prefix(ids[0])))  # their blobs did not
    assert eviction_pass.drain_deletions(db_settings, blobs) == 0  # within the grace period: left alone

    monkeypatch.setattr(eviction_pass, "OUTBOX_GRACE_S", 0.0)
    assert eviction_pass.drain_deletions(db_settings, blobs, batch=1) == 2 * (1 + len(KS))
    assert list(blobs.list(keys.entry_prefix(ids[0]))) == list(blobs.list(keys.entry_prefix(ids[1]))) == []
    assert list(blobs.list(keys.entry_prefix(ids[2])))
    with session_scope(db_settings) as session:
        assert session.scalar(select(func.count()).select_from(BlobDeletion)) == 0
        assert eviction_sql.cache_scopes(session).count(scope) == 1
