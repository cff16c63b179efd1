"""Video cache entries' rows and the guarded read of a video hit's source, and the budget and
policy of a video scope (LRBU under the video budget, FlexCache 4.2.3)."""

from __future__ import annotations

import uuid

import pytest

from core.errors import SourceVanished
from core.scopes import tenant_scope, video_scope
from core.settings import Settings
from core.vocabulary import EvictionPolicyName
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.video_entries import insert_video_entry, read_video_source
from jobs.passes.eviction import scope_budget

pytestmark = pytest.mark.integration


def _insert(settings: Settings, blobs: LocalBlobStore, *, scope: str | None = None) -> uuid.UUID:
    entry_id = uuid.uuid4()
    state, base, mask = (
        keys.video_state_key(entry_id, 4),
        keys.video_base_key(entry_id),
        keys.video_mask_key(entry_id),
    )
    for key in (state, base, mask):
        blobs.put(key, key.encode())
    with session_scope(settings) as session:
        insert_video_entry(
            session,
            entry_id=entry_id,
            scope=scope or video_scope(tenant_scope(uuid.uuid4())),
            model_family="tiny-video",
            prompt="a fox in a forest",
            prompt_key=None,
            text_embedding=[0.1] * 384,
            object_embedding=[0.2] * 384,
            background_embedding=None,
            frames=8,
            width=64,
            height=64,
            steps=10,
            source_job_id=None,
            final_latent_key=None,
            base_key=base,
            mask_key=mask,
            bytes=10,
            states={4: (state, 7)},
        )
    return entry_id


def test_a_stored_entry_reads_back_with_its_shape(db_settings: Settings, blob_store: LocalBlobStore) -> None:
    entry_id = _insert(db_settings, blob_store)
    with session_scope(db_settings) as session:
        source = read_video_source(session, blob_store, entry_id=entry_id, k=4)
    assert source.state == keys.video_state_key(entry_id, 4).encode()
    assert source.mask == keys.video_mask_key(entry_id).encode()
    assert (source.frames, source.width, source.height, source.steps) == (8, 64, 64, 10)


@pytest.mark.parametrize("gone", ["state row", "base blob", "entry"])
def test_a_missing_state_base_or_entry_is_a_vanished_source(
    db_settings: Settings, blob_store: LocalBlobStore, gone: str
) -> None:
    entry_id = _insert(db_settings, blob_store)
    k = 6 if gone == "state row" else 4  # no state at 6: a hole
    if gone == "base blob":
        blob_store.delete([keys.video_base_key(entry_id)])
    with session_scope(db_settings) as session, pytest.raises(SourceVanished):
        read_video_source(session, blob_store, entry_id=uuid.uuid4() if gone == "entry" else entry_id, k=k)


def test_video_entries_live_only_in_a_video_scope(db_settings: Settings, blob_store: LocalBlobStore) -> None:
    with pytest.raises(ValueError, match="video scope"):
        _insert(db_settings, blob_store, scope=tenant_scope(uuid.uuid4()))


def test_a_video_scope_is_kept_by_lrbu_under_the_video_budget(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"video_cache_budget_bytes": 123, "cache_budget_bytes": 456})
    image_scope = tenant_scope(uuid.uuid4())
    assert scope_budget(settings, video_scope(image_scope)) == (123, EvictionPolicyName.LRBU)
    assert scope_budget(settings, image_scope) == (456, settings.eviction_policy)
