"""Video jobs (FlexCache).

- jobs: `kind` ('image' or 'video'), a video's `frames`, `fps` and `noise_window`; a decoupled hit's
  second source, `background_entry_id` (source_entry_id gives the object); `video_hit` (whole or
  decoupled). Its animated WebP, once decoded (on the first read, or at completion with "decode":
  "eager"), is one of its image_keys, under db.images.video_format(fps).
- cache_entries: a video entry's `frames`; the embeddings of its prompt's object and background phrases
  (jobs.policies.decoupling; NULL when the prompt names no background), looked up separately (FlexCache
  4.2.1); `base_key`, the blob every compressed state of the entry is rebuilt against (db.codec.video,
  4.1.2), and `mask_key`, its 1-bit object mask (workers.runtime.stitching, 4.2.2). Video entries live in
  scopes of their own ("video:<scope>", core.scopes.video_scope): an image lookup never finds one, and
  their byte budget and eviction policy (LRBU, 4.2.3) are theirs.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import UUID

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _text_dim() -> int:
    attributes = context.config.attributes
    if "text_embedding_dim" in attributes:
        return int(attributes["text_embedding_dim"])
    from core.settings import get_settings

    return get_settings().text_embedding_dim


def upgrade() -> None:
    dim = _text_dim()
    op.add_column("jobs", sa.Column("kind", sa.String(8), nullable=False, server_default="image"))
    op.create_check_constraint("ck_jobs_kind", "jobs", "kind IN ('image','video')")
    for name in ("frames", "fps", "noise_window"):
        op.add_column("jobs", sa.Column(name, sa.Integer(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column(
            "background_entry_id",
            UUID(as_uuid=True),
            sa.ForeignKey("cache_entries.id", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.add_column("jobs", sa.Column("video_hit", sa.String(16), nullable=True))
    op.add_column("cache_entries", sa.Column("frames", sa.Integer(), nullable=True))
    op.add_column("cache_entries", sa.Column("object_embedding", Vector(dim), nullable=True))
    op.add_column("cache_entries", sa.Column("background_embedding", Vector(dim), nullable=True))
    op.add_column("cache_entries", sa.Column("base_key", sa.Text(), nullable=True))
    op.add_column("cache_entries", sa.Column("mask_key", sa.Text(), nullable=True))


def downgrade() -> None:
    for name in ("mask_key", "base_key", "background_embedding", "object_embedding", "frames"):
        op.drop_column("cache_entries", name)
    for name in ("video_hit", "background_entry_id", "noise_window", "fps", "frames"):
        op.drop_column("jobs", name)
    op.drop_constraint("ck_jobs_kind", "jobs")
    op.drop_column("jobs", "kind")
