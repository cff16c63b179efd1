"""Latent-only generation (LatentBox 4.1): the request's decode mode, the VAE decodes a
job's generation ran, and per-interval decode and read counters.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_INTERVAL_COUNTERS = ("generations", "generation_decodes", "image_reads", "read_decodes")


def upgrade() -> None:
    # Rows written before this revision were generated with a decode: "lazy" is what they asked for.
    op.add_column("jobs", sa.Column("decode_mode", sa.String(8), nullable=False, server_default="lazy"))
    op.add_column("jobs", sa.Column("vae_decodes", sa.Integer, nullable=False, server_default="0"))
    for name in _INTERVAL_COUNTERS:
        op.add_column("interval_stats", sa.Column(name, sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    for name in reversed(_INTERVAL_COUNTERS):
        op.drop_column("interval_stats", name)
    op.drop_column("jobs", "vae_decodes")
    op.drop_column("jobs", "decode_mode")
