"""`reprise bench cache` on the real database: the JSON contract, sane figures, and no data left behind."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from bench.cache.index import measure_cache
from core.settings import Settings
from db.engine import session_scope
from db.models import CacheEntry

pytestmark = pytest.mark.integration

CONTRACT = {"lookup_p50_ms", "lookup_p99_ms", "recall_at_1", "evict_pass_ms", "entries", "dim"}


def test_bench_cache_reports_the_contract_and_cleans_up(db_settings: Settings) -> None:
    def bench_rows() -> int:
        with session_scope(db_settings) as session:
            count = session.scalar(
                select(func.count()).select_from(CacheEntry).where(CacheEntry.scope.like("bench:%"))
            )
        return int(count or 0)

    before = bench_rows()
    result = measure_cache(db_settings, entries=120, queries=15)
    report = result.as_json()
    assert set(report) >= CONTRACT
    assert report["entries"] == 120 and report["dim"] == db_settings.text_embedding_dim
    assert 0 < report["lookup_p50_ms"] <= report["lookup_p99_ms"]
    assert report["recall_at_1"] == pytest.approx(1.0)  # 120 entries: the index walk is exhaustive
    assert report["evict_pass_ms"] > 0
    # 1% of the bytes: at least one state (and at most a few) was evicted
    assert report["states_evicted"] >= 1 and report["states_evicted"] <= 2 * len(db_settings.capture_steps)
    assert bench_rows() == before


def test_bench_cache_refuses_nonsense(db_settings: Settings) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        measure_cache(db_settings, entries=0)


CLASS_CONTRACT = {"scope_entries", "lookups", "lookup_p50_ms", "lookup_p99_ms", "recall_at_1"}


def test_bench_cache_over_many_scopes_reports_each_size_class(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"lookup_exact_max": 100})
    report = measure_cache(settings, entries=400, queries=40, scopes=6).as_json()
    assert report["scopes"] == 7  # six tenants and the shared scope
    classes = report["by_class"]
    assert classes and all(set(row) >= CLASS_CONTRACT for row in classes)
    assert [row["scope_entries"] for row in classes] == sorted(row["scope_entries"] for row in classes)
    assert sum(row["lookups"] for row in classes) == report["queries"]
    small = [row for row in classes if row["scope_entries"] <= 100]
    assert small and all(set(row["paths"]) == {"exact"} for row in small)  # at most exact_max entries
    assert report["recall_at_1"] == pytest.approx(1.0)


def test_scope_sizes_follow_zipf_with_a_shared_scope_and_add_up() -> None:
    from bench.cache.fill import scope_sizes

    assert scope_sizes(1000, 1) == [1000]
    sizes = scope_sizes(100_000, 1000)
    assert len(sizes) == 1001 and sum(sizes) == 100_000 and min(sizes) >= 1
    assert sizes[0] > 10 * sizes[len(sizes) // 2]  # skewed: the largest tenant dwarfs the median one
    assert 10_000 in sizes  # the shared scope holds the tenants' remainder, a tenth


def test_a_bulk_build_refuses_a_database_with_real_entries_and_keeps_the_index(db_settings: Settings) -> None:
    import uuid

    import numpy as np
    from sqlalchemy import delete, text

    from bench.cache.index import TEXT_INDEX
    from db import cache

    entry_id = uuid.uuid4()
    with session_scope(db_settings) as session:
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=f"tenant:{uuid.uuid4()}",
            model_family="f",
            prompt="p",
            text_embedding=np.ones(db_settings.text_embedding_dim, dtype=np.float32),
            image_embedding=None,
            final_latent_key=None,
            final_bytes=0,
            steps=50,
            states=[],
        )
    try:
        with pytest.raises(ValueError, match="--bulk-build needs a database without cache entries"):
            measure_cache(db_settings, entries=10, queries=2, bulk_build=True)
        with session_scope(db_settings) as session:
            assert session.execute(text("SELECT to_regclass(:n)"), {"n": TEXT_INDEX}).scalar() is not None
    finally:
        with session_scope(db_settings) as session:
            session.execute(delete(CacheEntry).where(CacheEntry.id == entry_id))


def test_churn_rounds_replace_entries_and_report_before_and_after_the_index_pass(
    db_settings: Settings,
) -> None:
    settings = db_settings.model_copy(update={"index_rebuild_ratio": 50.0})  # measured, not rebuilt here
    report = measure_cache(settings, entries=200, queries=10, churn_rounds=2).as_json()
    churn = report["churn"]
    assert churn["rounds"] == 2
    for stage in ("after_churn", "after_rebuild"):
        assert set(churn[stage]) >= {"lookup_p50_ms", "lookup_p99_ms", "recall_at_1", "index_mib"}
    names = {row["index"] for row in churn["index_health"]}
    assert "ix_cache_entries_text_embedding_hnsw" in names
    assert not any(row["rebuilt"] for row in churn["index_health"])  # below the (raised) ratio
