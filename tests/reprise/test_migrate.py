"""Migrations upgrade and downgrade cleanly against the real database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import inspect, text

from core.errors import EmbeddingDimensionMismatch
from core.settings import Settings
from db.engine import engine_for
from reprise import migrate

pytestmark = pytest.mark.integration

EXPECTED_TABLES = {
    "tenants",
    "api_keys",
    "jobs",
    "cache_entries",
    "cache_states",
    "interval_stats",
    "webhook_deliveries",
    "worker_roles",
    "pool_decisions",
    "predictor_fits",
    "discriminators",  # DiffServe's cascade (DiffServe 3.2)
    "cascade_decisions",
    "read_tier_decisions",  # LatentBox 4.3: the decode nodes' tuning decisions
    "cache_scope_bytes",  # per-scope byte counters, and the blob-deletion outbox
    "blob_deletions",
    "quality_audits",  # the quality guard: hits audited against fresh generations
    "quality_guard_decisions",  # and every change it made to the k table
}


@pytest.fixture()
def scratch_settings(service_settings: Settings) -> Iterator[Settings]:
    name = f"reprise_mig_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = service_settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    admin = admin.rpartition("/")[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rpartition("/")[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    yield service_settings.model_copy(update={"database_url": url, "text_embedding_dim": 16})
    engine_for(url).dispose()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _tables(settings: Settings) -> set[str]:
    return set(inspect(engine_for(settings.sqlalchemy_url)).get_table_names()) - {"alembic_version"}


def test_upgrade_creates_schema_with_vector_columns_and_hnsw_indexes(scratch_settings: Settings) -> None:
    migrate.upgrade(scratch_settings)
    assert _tables(scratch_settings) == EXPECTED_TABLES
    with engine_for(scratch_settings.sqlalchemy_url).connect() as conn:
        assert conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).scalar() == 1
        indexes = (
            conn.execute(
                text(
                    "SELECT indexdef FROM pg_indexes "
                    "WHERE tablename = 'cache_entries' AND indexdef LIKE '%hnsw%'"
                )
            )
            .scalars()
            .all()
        )
        typmods: dict[str, int] = dict(
            conn.execute(
                text(
                    "SELECT attname, atttypmod FROM pg_attribute WHERE attrelid = 'cache_entries'::regclass "
                    "AND attname IN ('text_embedding', 'image_embedding')"
                )
            ).all()
        )
    assert len(indexes) == 2 and all("vector_cosine_ops" in index for index in indexes)
    assert typmods == {"text_embedding": 16, "image_embedding": scratch_settings.image_embedding_dim}


def test_downgrade_removes_everything_and_upgrade_again_works(scratch_settings: Settings) -> None:
    migrate.upgrade(scratch_settings)
    migrate.downgrade(scratch_settings, "base")
    assert _tables(scratch_settings) == set()
    migrate.upgrade(scratch_settings)
    assert _tables(scratch_settings) == EXPECTED_TABLES


def test_dimension_mismatch_is_refused_with_the_variable_to_set(scratch_settings: Settings) -> None:
    migrate.upgrade(scratch_settings)
    other = scratch_settings.model_copy(update={"text_embedding_dim": 384})
    with pytest.raises(EmbeddingDimensionMismatch, match="REPRISE_TEXT_EMBEDDING_DIM=16"):
        migrate.check_embedding_dims(other)


def test_the_scope_byte_counters_start_from_the_rows_already_there(scratch_settings: Settings) -> None:
    """Migration 0011 counts the bytes of a cache filled before it; its triggers take over from there."""
    migrate.upgrade(scratch_settings, "0010")
    entry = (
        "INSERT INTO cache_entries (id, scope, model_family, prompt, text_embedding, bytes, steps, width, "
        "height, created_at, last_access_at, access_count, state) VALUES (:id, :scope, 'f', 'p', :vector, "
        ":bytes, 50, 512, 512, now(), now(), 0, 'live')"
    )
    state = (
        "INSERT INTO cache_states (entry_id, k, blob_key, bytes, access_count, created_at, last_access_at) "
        "VALUES (:id, 25, 'k', 70, 0, now(), now())"
    )
    vector = "[" + ",".join(["0.25"] * 16) + "]"
    with engine_for(scratch_settings.sqlalchemy_url).begin() as conn:
        for scope, size in (("a", 100), ("a", 200), ("b", 5)):
            entry_id = uuid.uuid4()
            conn.execute(text(entry), {"id": entry_id, "scope": scope, "vector": vector, "bytes": size})
            conn.execute(text(state), {"id": entry_id})
    migrate.upgrade(scratch_settings)
    with engine_for(scratch_settings.sqlalchemy_url).begin() as conn:
        conn.execute(
            text(
                "DELETE FROM cache_states WHERE bytes = 70 AND entry_id IN "
                "(SELECT id FROM cache_entries WHERE bytes = 5)"
            )
        )
        counted: dict[str, int] = dict(conn.execute(text("SELECT scope, bytes FROM cache_scope_bytes")).all())
    assert counted == {"a": 100 + 200 + 2 * 70, "b": 5}
