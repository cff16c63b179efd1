"""The read path (LatentBox 4.3): deleted and expired jobs, and the decode nodes' tier decisions.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # DELETE /v1/generations/{id} keeps the row as a tombstone (a repeated DELETE answers the same).
    op.add_column("jobs", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    # The retention pass (or a DELETE) removed the job's stored outputs.
    op.add_column("jobs", sa.Column("outputs_purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_jobs_purge_pending",
        "jobs",
        ["finished_at"],
        postgresql_where=sa.text("outputs_purged_at IS NULL"),
    )
    op.create_table(
        "read_tier_decisions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("node", sa.Text, nullable=False),
        sa.Column("reads", sa.Integer, nullable=False),
        sa.Column("alpha_before", sa.Float, nullable=False),
        sa.Column("alpha", sa.Float, nullable=False),
        sa.Column("promote_after", sa.Integer, nullable=False),
        sa.Column("mr_img", sa.Float, nullable=False),
        sa.Column("mr_lat", sa.Float, nullable=False),
        sa.Column("delta_img", sa.Float, nullable=False),
        sa.Column("delta_lat", sa.Float, nullable=False),
        sa.Column("t_decode_ms", sa.Float, nullable=False),
        sa.Column("t_fetch_ms", sa.Float, nullable=False),
        sa.Column("gradient", sa.Float, nullable=False),
    )
    op.create_index("ix_read_tier_decisions_node_at", "read_tier_decisions", ["node", "decided_at"])


def downgrade() -> None:
    op.drop_index("ix_read_tier_decisions_node_at", "read_tier_decisions")
    op.drop_table("read_tier_decisions")
    op.drop_index("ix_jobs_purge_pending", "jobs")
    op.drop_column("jobs", "outputs_purged_at")
    op.drop_column("jobs", "deleted_at")
