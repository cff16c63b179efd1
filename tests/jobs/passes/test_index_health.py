"""The index-health pass on the real Postgres: it measures each HNSW index against a fresh build of its
rows and rebuilds, concurrently, the one past the ratio (a fill then a mass deletion leaves the graph
large for the rows left)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sqlalchemy import delete

from bench.cache.fill import fill, synthetic_embeddings
from core.settings import Settings
from db.engine import session_scope
from db.index_health import IndexSize, index_sizes, reindex_concurrently
from db.models import CacheEntry
from jobs.passes.index_health import MIN_REBUILD_BYTES, check_indexes, fresh_bytes, needs_rebuild

pytestmark = pytest.mark.integration


def test_the_ratio_is_the_size_against_a_fresh_build_and_small_indexes_are_left_alone() -> None:
    fresh = fresh_bytes(10_000, 384)
    assert fresh == 10_000 * (4 * 384 + 512)
    assert needs_rebuild(IndexSize("i", "text_embedding", 3 * fresh, 10_000), 384, 2.0) == (True, 3.0)
    assert needs_rebuild(IndexSize("i", "text_embedding", fresh, 10_000), 384, 2.0) == (False, 1.0)
    tiny = IndexSize("i", "text_embedding", MIN_REBUILD_BYTES - 1, 1)
    assert needs_rebuild(tiny, 384, 2.0)[0] is False  # a few pages: not worth a rebuild


def test_a_bloated_index_is_rebuilt_and_shrinks(db_settings: Settings) -> None:
    scope = f"bench:{uuid.uuid4().hex}"
    rng = np.random.default_rng(3)
    settings = db_settings.model_copy(update={"index_rebuild_ratio": 1.5})
    fill(settings, scope, synthetic_embeddings(6000, settings.text_embedding_dim, rng), rng)
    try:
        with session_scope(settings) as session:
            session.execute(delete(CacheEntry).where(CacheEntry.scope == scope))
        [before] = [size for size in _sizes(settings) if size.column == "text_embedding"]
        assert before.index_bytes >= MIN_REBUILD_BYTES  # the deleted rows' tuples are still in the graph
        report = {row.index: row for row in check_indexes(settings)}
        text_index = report["ix_cache_entries_text_embedding_hnsw"]
        assert text_index.rebuilt and text_index.ratio > 1.5 and text_index.rebuild_s is not None
        [after] = [size for size in _sizes(settings) if size.column == "text_embedding"]
        assert after.index_bytes < before.index_bytes / 2
        again = {row.index: row for row in check_indexes(settings)}
        assert not again["ix_cache_entries_text_embedding_hnsw"].rebuilt  # healthy now
    finally:
        with session_scope(settings) as session:
            session.execute(delete(CacheEntry).where(CacheEntry.scope == scope))


def test_only_the_cache_indexes_can_be_rebuilt(db_settings: Settings) -> None:
    with pytest.raises(ValueError, match="not a cache index"):
        reindex_concurrently(db_settings.sqlalchemy_url, "jobs_pkey")


def _sizes(settings: Settings) -> list[IndexSize]:
    with session_scope(settings) as session:
        return index_sizes(session)
