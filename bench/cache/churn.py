"""Churn for `reprise bench cache --churn-rounds R`: a cache deletes entries all the time (eviction) and
inserts new ones; an HNSW index keeps the deleted tuples. Each round replaces CHURN_SHARE of the largest
scope: its oldest entries are deleted (FIFO, MoDM 5.4's policy) and as many new ones inserted (one graph
insertion each, as misses do), then autovacuum's work is done (VACUUM). After the rounds the lookups are
measured again, then jobs.passes.index_health runs (REINDEX CONCURRENTLY past the configured ratio) and
they are measured once more: p99 before churn, after it, and after the rebuild."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
from sqlalchemy import text

from bench.cache.fill import BenchScope, fill, scope_vectors
from core.settings import Settings
from db.engine import engine_for, session_scope
from jobs.passes.index_health import check_indexes

CHURN_SHARE = 0.1


def churn_round(settings: Settings, scope: BenchScope, rng: np.random.Generator) -> None:
    count = max(1, int(scope.entries * CHURN_SHARE))
    with session_scope(settings) as session:
        session.execute(
            text(
                "DELETE FROM cache_entries WHERE id IN (SELECT id FROM cache_entries WHERE scope = :scope "
                "ORDER BY created_at, id LIMIT :count)"
            ),
            {"scope": scope.name, "count": count},
        )
    for chunk in scope_vectors(count, settings.text_embedding_dim, rng):
        fill(settings, scope.name, chunk, rng)
    with (
        engine_for(settings.sqlalchemy_url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn
    ):
        conn.execute(text("VACUUM cache_entries"))
        conn.execute(text("VACUUM cache_states"))


def index_mib(settings: Settings) -> float:
    with session_scope(settings) as session:
        size = session.execute(
            text("SELECT pg_relation_size('ix_cache_entries_text_embedding_hnsw')")
        ).scalar()
    return round(int(size or 0) / 2**20, 1)


def rebuild(settings: Settings) -> list[dict[str, Any]]:
    """The index-health pass as beat runs it: what it saw of each index and whether it rebuilt it."""
    return [asdict(health) for health in check_indexes(settings)]
