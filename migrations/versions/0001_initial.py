"""Initial schema: vector extension, tenants, keys, jobs, cache entries and states, statistics,
webhook deliveries, worker roles, pool monitor decisions, predictor fits.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _dims() -> tuple[int, int]:
    """Embedding dimensions: from the Alembic config attributes, else from settings."""
    attributes = context.config.attributes
    if "text_embedding_dim" in attributes and "image_embedding_dim" in attributes:
        return int(attributes["text_embedding_dim"]), int(attributes["image_embedding_dim"])
    from core.settings import get_settings

    settings = get_settings()
    return settings.text_embedding_dim, settings.image_embedding_dim


def _timestamps(*names: str) -> list[sa.Column[object]]:
    return [sa.Column(name, sa.DateTime(timezone=True), nullable=True) for name in names]


def upgrade() -> None:
    text_dim, image_dim = _dims()
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    op.create_table(
        "tenants",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("webhook_secret", sa.Text, nullable=False),
        sa.Column("shared_cache", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("inflight_limit", sa.Integer, nullable=False, server_default="64"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column(
            "tenant_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "cache_entries",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("scope", sa.String(64), nullable=False, index=True),
        sa.Column("model_family", sa.String(128), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("text_embedding", Vector(text_dim), nullable=False),
        sa.Column("image_embedding", Vector(image_dim), nullable=True),
        sa.Column("final_latent_key", sa.Text, nullable=True),
        sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("steps", sa.Integer, nullable=False, server_default="50"),
        sa.Column("width", sa.Integer, nullable=False, server_default="512"),
        sa.Column("height", sa.Integer, nullable=False, server_default="512"),
        sa.Column("source_job_id", pg.UUID(as_uuid=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_access_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("access_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", sa.String(8), nullable=False, server_default="live"),
        sa.CheckConstraint("state IN ('live','dirty')", name="ck_cache_entries_state"),
    )
    op.create_index("ix_cache_entries_scope_family", "cache_entries", ["scope", "model_family", "state"])
    op.execute(
        "CREATE INDEX ix_cache_entries_text_embedding_hnsw ON cache_entries "
        "USING hnsw (text_embedding vector_cosine_ops)"
    )
    op.execute(
        "CREATE INDEX ix_cache_entries_image_embedding_hnsw ON cache_entries "
        "USING hnsw (image_embedding vector_cosine_ops)"
    )
    op.create_table(
        "cache_states",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column(
            "entry_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("cache_entries.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("blob_key", sa.Text, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("access_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_access_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("entry_id", "k", name="uq_cache_states_entry_k"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column(
            "tenant_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("negative_prompt", sa.Text, nullable=True),
        sa.Column("seed", sa.BigInteger, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("guidance", sa.Float, nullable=False),
        sa.Column("cache_mode", sa.String(16), nullable=False, server_default="auto"),
        sa.Column("webhook_url", sa.Text, nullable=True),
        sa.Column("webhook_events_filter", pg.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_fingerprint", sa.String(64), nullable=True),
        sa.Column("admission_outcome", sa.String(16), nullable=True),
        sa.Column("predictor_said_hit", sa.Boolean, nullable=True),
        sa.Column("route", sa.String(8), nullable=True),
        sa.Column("similarity", sa.Float, nullable=True),
        sa.Column("k", sa.Integer, nullable=True),
        sa.Column(
            "source_entry_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("cache_entries.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("admission_ms", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("models_used", pg.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("denoiser_evals", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("final_latent_key", sa.Text, nullable=True),
        sa.Column("image_keys", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now(), index=True
        ),
        *_timestamps("admitted_at", "started_at", "finished_at"),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        sa.CheckConstraint(
            "status IN ('starting','processing','succeeded','failed','canceled')", name="ck_jobs_status"
        ),
        sa.CheckConstraint("route IS NULL OR route IN ('hit','miss')", name="ck_jobs_route"),
    )
    # Listing a tenant's jobs newest first, and counting its in-flight ones.
    op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at", "id"])
    op.create_index("ix_jobs_tenant_status", "jobs", ["tenant_id", "status"])
    op.create_table(
        "interval_stats",
        sa.Column("period_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("period_seconds", sa.Integer, primary_key=True),
        sa.Column("arrivals", sa.Integer, nullable=False, server_default="0"),
        sa.Column("hits", sa.Integer, nullable=False, server_default="0"),
        sa.Column("misses", sa.Integer, nullable=False, server_default="0"),
        sa.Column("predicted_misses", sa.Integer, nullable=False, server_default="0"),
        sa.Column("k_histogram", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("service_time", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("denoiser_evals", pg.JSONB, nullable=False, server_default="{}"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_webhook_deliveries_message_attempt", "webhook_deliveries", ["message_id", "attempt"])
    op.create_table(
        "worker_roles",
        sa.Column("worker_name", sa.String(255), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("pinned", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "pool_decisions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_seconds", sa.Integer, nullable=False),
        sa.Column("inputs", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("heuristic_large", sa.Float, nullable=True),
        sa.Column("controlled_large", sa.Float, nullable=False),
        sa.Column("pid_integral", sa.Float, nullable=False),
        sa.Column("pid_error", sa.Float, nullable=True),
        sa.Column("large_before", sa.Integer, nullable=False),
        sa.Column("small_before", sa.Integer, nullable=False),
        sa.Column("target_large", sa.Integer, nullable=False),
        sa.Column("target_small", sa.Integer, nullable=False),
        sa.Column("applied_large", sa.Integer, nullable=False),
        sa.Column("applied_small", sa.Integer, nullable=False),
        sa.Column("switches", pg.JSONB, nullable=False, server_default="[]"),
    )
    # The monitor continues from the newest decision; /v1/stats and /metrics show it.
    op.create_index("ix_pool_decisions_decided_at", "pool_decisions", ["decided_at"])
    op.create_table(
        "predictor_fits",
        sa.Column("version", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(64), nullable=False, index=True),
        sa.Column("model_family", sa.String(128), nullable=False),
        sa.Column("mode", sa.String(8), nullable=False),
        sa.Column("entries", sa.Integer, nullable=False),
        sa.Column("model", sa.LargeBinary, nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("true_pos", sa.Integer, nullable=False, server_default="0"),
        sa.Column("false_pos", sa.Integer, nullable=False, server_default="0"),
        sa.Column("false_neg", sa.Integer, nullable=False, server_default="0"),
        sa.Column("true_neg", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    for table in (
        "predictor_fits",
        "pool_decisions",
        "worker_roles",
        "webhook_deliveries",
        "interval_stats",
        "jobs",
        "cache_states",
        "cache_entries",
        "api_keys",
        "tenants",
    ):
        op.drop_table(table)
    # The extension may be shared with other schemas in a managed database: leave it installed.
