"""FlexCache's three lookups on the real Postgres (db.video_lookup): by the whole prompt, the object and the
background phrase, only entries of the job's shape and family, in the scopes asked, with their states."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from core.scopes import video_scope
from core.settings import Settings
from db.engine import session_scope
from db.models import CacheEntry, CacheState
from db.video_lookup import VideoIndex, VideoMatch, VideoShape, nearest_video

pytestmark = pytest.mark.integration

SHAPE = VideoShape("tiny-video", frames=8, width=64, height=64)


def unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    vector = rng.standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def add(
    settings: Settings,
    scope: str,
    text: np.ndarray,
    obj: np.ndarray | None,
    ks: tuple[int, ...],
    **shape: int,
) -> uuid.UUID:
    entry = CacheEntry(
        scope=scope,
        model_family=(shape.pop("family", 0) and "other") or "tiny-video",
        prompt="p",
        text_embedding=text,
        object_embedding=obj,
        background_embedding=obj,
        frames=shape.get("frames", 8),
        width=shape.get("width", 64),
        height=64,
        steps=10,
    )
    with session_scope(settings) as session:
        session.add(entry)
        session.flush()
        session.add_all(CacheState(entry_id=entry.id, k=k, blob_key=f"{entry.id}/{k}", bytes=1) for k in ks)
        return entry.id


def test_each_index_finds_its_nearest_entry_of_the_jobs_shape(db_settings: Settings) -> None:
    rng, dim = np.random.default_rng(3), db_settings.text_embedding_dim
    scope = video_scope(f"tenant:{uuid.uuid4()}")
    query = unit(rng, dim)
    near = add(db_settings, scope, query * 0.9 + unit(rng, dim) * 0.1, None, (2, 4))
    phrases = add(db_settings, scope, unit(rng, dim), query, (2, 4, 6))
    add(db_settings, scope, query, query, (2,), frames=16)  # identical, but 16 frames
    add(db_settings, scope, query, query, (2,), width=32)  # identical, but another size
    add(db_settings, scope, query, query, (2,), family=1)  # identical, but another model's latents
    add(db_settings, video_scope("shared"), query, query, (2,))  # identical, in a scope not asked
    with session_scope(db_settings) as session:

        def nearest(index: VideoIndex, scopes: list[str]) -> VideoMatch | None:
            return nearest_video(session, index=index, embedding=query, scopes=scopes, shape=SHAPE)

        whole, obj = nearest(VideoIndex.WHOLE, [scope]), nearest(VideoIndex.OBJECT, [scope])
        bg, none = nearest(VideoIndex.BACKGROUND, [scope]), nearest(VideoIndex.WHOLE, ["video:nobody"])
    assert whole is not None and whole.entry_id == near and whole.stored_ks == (2, 4)
    assert 0.9 < whole.similarity < 1.0
    # the near entry has no phrase embeddings: the object and background indexes skip it
    assert obj is not None and obj.entry_id == phrases and obj.similarity == pytest.approx(1.0, abs=1e-5)
    assert bg is not None and bg.entry_id == phrases and bg.stored_ks == (2, 4, 6)
    assert none is None
