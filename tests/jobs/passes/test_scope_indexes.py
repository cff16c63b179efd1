"""Scopes of their own HNSW index, on the real Postgres: beat's pass builds one for a large
scope, the lookup's plan walks it (not the shared index), and it goes when the scope shrinks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import delete, event, text

from bench.cache.fill import BENCH_FAMILY, fill, near_duplicates, synthetic_embeddings
from core.settings import Settings
from core.vocabulary import LookupMode
from db import cache, lookup_path, scope_indexes
from db.engine import session_scope
from db.models import CacheEntry
from jobs.passes.index_health import check_indexes
from jobs.passes.scope_indexes import check_scope_indexes

pytestmark = pytest.mark.integration

SHRINK = "DELETE FROM cache_entries WHERE id IN (SELECT id FROM cache_entries WHERE scope = :s LIMIT :n)"


@pytest.fixture
def scopes(db_settings: Settings) -> Iterator[tuple[str, str]]:
    large, small = f"bench:l{uuid.uuid4().hex[:8]}", f"bench:s{uuid.uuid4().hex[:8]}"
    yield large, small
    with session_scope(db_settings) as session:
        session.execute(delete(CacheEntry).where(CacheEntry.scope.in_([large, small])))
    check_scope_indexes(db_settings.model_copy(update={"scope_index_min_entries": 0}))  # drops every one


def planned_index(settings: Settings, scope: str, query: np.ndarray) -> str:
    """The index the lookup's own statement is planned to walk for cache_entries (EXPLAIN of the statement
    db.cache.lookup sent, with its parameters)."""
    with session_scope(settings) as session:
        sent: list[tuple[str, object]] = []
        event.listen(session.connection(), "before_cursor_execute", lambda *a: sent.append((a[2], a[3])))
        found = cache.lookup(
            session,
            query_embedding=query,
            mode=LookupMode.TEXT_TO_TEXT,
            scopes=[scope],
            model_family=BENCH_FAMILY,
            ef_search=40,
            exact_max=0,
        )
        assert found is not None and found.scope == scope
        statement, params = sent[-1]
        cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
        # A test table is small enough for a scan and a sort; at scale the planner walks an index. Which
        # one it walks, when it must, is the question here.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    entries_scan = re.search(r"Index Scan using (\S+) on cache_entries", plan)
    return entries_scan.group(1) if entries_scan else "no index"


def test_a_large_scope_gets_its_own_index_and_loses_it_when_it_shrinks(
    db_settings: Settings, scopes: tuple[str, str]
) -> None:
    large, small = scopes
    rng = np.random.default_rng(5)
    vectors = synthetic_embeddings(300, db_settings.text_embedding_dim, rng)
    fill(db_settings, large, vectors, rng)
    fill(db_settings, small, synthetic_embeddings(40, db_settings.text_embedding_dim, rng), rng)
    settings = db_settings.model_copy(update={"scope_index_min_entries": 100})
    cache.analyze(settings.sqlalchemy_url)
    query = near_duplicates(vectors[:1], 0.95, rng)[0]
    assert planned_index(settings, large, query) == "ix_cache_entries_text_embedding_hnsw"

    report = check_scope_indexes(settings)  # other tests' scopes of the database may get one too
    assert [(scope, entries) for scope, entries, _ in report.created if scope in scopes] == [(large, 300)]
    own = scope_indexes.scope_index_name(large, "text_embedding")
    assert planned_index(settings, large, query) == own
    assert planned_index(settings, small, query) == "ix_cache_entries_text_embedding_hnsw"
    assert not {scope for scope, _, _ in check_scope_indexes(settings).created} & set(scopes)  # built once

    with session_scope(settings) as session:  # 300 -> 60: still above half the bound (50), kept
        session.execute(text(SHRINK), {"s": large, "n": 240})
    assert large not in check_scope_indexes(settings).dropped
    with session_scope(settings) as session:  # 60 -> 20: dropped
        session.execute(text(SHRINK), {"s": large, "n": 40})
    assert large in check_scope_indexes(settings).dropped
    with session_scope(settings) as session:
        assert own not in {index.name for index in scope_indexes.scope_indexes(session)}


def test_scope_names_are_quoted_and_only_scope_indexes_can_be_dropped(db_settings: Settings) -> None:
    odd = "bench:it's; DROP TABLE jobs"
    rng = np.random.default_rng(1)
    fill(db_settings, odd, synthetic_embeddings(5, db_settings.text_embedding_dim, rng), rng)
    try:
        name = scope_indexes.create_scope_index(db_settings.sqlalchemy_url, odd, "text_embedding")
        with session_scope(db_settings) as session:
            assert (name, odd) in {
                (index.name, index.scope) for index in scope_indexes.scope_indexes(session)
            }
            assert session.scalar(text("SELECT to_regclass('jobs')")) is not None
        with pytest.raises(ValueError, match="not a scope index"):
            scope_indexes.drop_scope_index(db_settings.sqlalchemy_url, "jobs_pkey")
    finally:
        with session_scope(db_settings) as session:
            session.execute(delete(CacheEntry).where(CacheEntry.scope == odd))
        scope_indexes.drop_scope_index(
            db_settings.sqlalchemy_url, scope_indexes.scope_index_name(odd, "text_embedding")
        )


def test_a_scope_index_bloated_by_churn_is_rebuilt(db_settings: Settings, scopes: tuple[str, str]) -> None:
    large, _ = scopes
    rng = np.random.default_rng(9)
    fill(db_settings, large, synthetic_embeddings(6000, db_settings.text_embedding_dim, rng), rng)
    settings = db_settings.model_copy(update={"scope_index_min_entries": 100, "index_rebuild_ratio": 1.5})
    check_scope_indexes(settings)
    own = scope_indexes.scope_index_name(large, "text_embedding")
    with session_scope(settings) as session:  # churn: most of the scope replaced
        session.execute(text(SHRINK), {"s": large, "n": 5000})
    fill(settings, large, synthetic_embeddings(200, settings.text_embedding_dim, rng), rng)
    report = {row.index: row for row in check_indexes(settings)}
    assert report[own].rebuilt and report[own].rows == 1200
    assert {row.index: row for row in check_indexes(settings)}[own].ratio < 1.5


def walked_ef(settings: Settings, scope: str, query: np.ndarray, reference: int) -> int:
    """The hnsw.ef_search a lookup in `scope` walked with (set for its transaction by db.lookup_path)."""
    with session_scope(settings) as session:
        cache.lookup(
            session,
            query_embedding=query,
            mode=LookupMode.TEXT_TO_TEXT,
            scopes=[scope],
            model_family=BENCH_FAMILY,
            ef_search=40,
            exact_max=0,
            ef_reference_entries=reference,
        )
        return int(session.scalar(text("SELECT current_setting('hnsw.ef_search')")) or 0)


def test_ef_search_grows_with_the_size_of_the_scopes_own_index(
    db_settings: Settings, scopes: tuple[str, str]
) -> None:
    large, small = scopes
    rng = np.random.default_rng(6)
    vectors = synthetic_embeddings(300, db_settings.text_embedding_dim, rng)
    fill(db_settings, large, vectors, rng)
    fill(db_settings, small, synthetic_embeddings(40, db_settings.text_embedding_dim, rng), rng)
    query = near_duplicates(vectors[:1], 0.95, rng)[0]
    assert walked_ef(db_settings, large, query, 100) == 40  # no index of its own yet: the base ef

    check_scope_indexes(db_settings.model_copy(update={"scope_index_min_entries": 100}))
    assert walked_ef(db_settings, large, query, 100) == lookup_path.scaled_ef(40, 300, 100) == 120
    assert walked_ef(db_settings, large, query, 7) == lookup_path.EF_SEARCH_MAX  # 40 x 300 / 7, capped
    assert walked_ef(db_settings, large, query, 300) == 40  # not past the reference
    assert walked_ef(db_settings, large, query, 0) == 40  # 0: fixed
    assert walked_ef(db_settings, small, query, 10) == 40  # the shared index's walk keeps the base ef
