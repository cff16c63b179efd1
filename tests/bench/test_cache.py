"""`reprise bench cache` on the real database: the JSON contract, sane figures, and no data left behind."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from bench.cache import measure_cache
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
