"""The quality guard's audits and decisions.

- quality_audits: one audited hit each: its similarity, k and steps, its score and a fresh
  generation's of the same request by the same scorer, and the drop (jobs.policies.quality_guard).
- quality_guard_decisions: each change of the guarded k table: the configured table, the new one,
  the target, the audits it read, the rows it moved and the estimates that moved them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quality_audits",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("audited_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("job_id", UUID(as_uuid=True), nullable=False),
        sa.Column("similarity", sa.Float, nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("hit_score", sa.Float, nullable=False),
        sa.Column("fresh_score", sa.Float, nullable=False),
        sa.Column("drop", sa.Float, nullable=False),
        sa.Column("scorer", sa.Text, nullable=False),
    )
    op.create_index("ix_quality_audits_audited_at", "quality_audits", ["audited_at"])
    op.create_table(
        "quality_guard_decisions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("base_table", sa.Text, nullable=False),
        sa.Column("table", sa.Text, nullable=False),
        sa.Column("target", sa.Float, nullable=False),
        sa.Column("audits", sa.Integer, nullable=False),
        sa.Column("changes", JSONB, nullable=False),
        sa.Column("estimates", JSONB, nullable=False),
    )
    op.create_index("ix_quality_guard_decisions_decided_at", "quality_guard_decisions", ["decided_at"])


def downgrade() -> None:
    op.drop_table("quality_guard_decisions")
    op.drop_table("quality_audits")
