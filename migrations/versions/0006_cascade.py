"""DiffServe's cascade (DiffServe 3.2, 3.3): each job's light stage, the discriminators, the
allocator's decisions.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for every job that did not go through the cascade (all earlier ones).
    op.add_column("jobs", sa.Column("cascade", JSONB, nullable=True))
    # A job the discriminator escalated is routed "heavy" (core.vocabulary.Route.HEAVY).
    op.drop_constraint("ck_jobs_route", "jobs", type_="check")
    op.create_check_constraint("ck_jobs_route", "jobs", "route IS NULL OR route IN ('hit','miss','heavy')")
    op.create_table(
        "discriminators",
        sa.Column("version", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("light_model", sa.Text, nullable=False),
        sa.Column("heavy_model", sa.Text, nullable=False),
        sa.Column("features", sa.String(16), nullable=False),
        sa.Column("accuracy", sa.Float, nullable=False),
        sa.Column("report", JSONB, nullable=False),
        sa.Column("model", sa.LargeBinary, nullable=False),
        sa.Column("trained_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_discriminators_light_model", "discriminators", ["light_model", "features"])
    op.create_table(
        "cascade_decisions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_seconds", sa.Integer, nullable=False),
        sa.Column("inputs", JSONB, nullable=False),
        sa.Column("solution", JSONB, nullable=False),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("feasible", sa.Boolean, nullable=False),
        sa.Column("objective", sa.Float, nullable=True),
        sa.Column("solve_ms", sa.Float, nullable=False),
        sa.Column("target_light", sa.Integer, nullable=False),
        sa.Column("target_heavy", sa.Integer, nullable=False),
        sa.Column("applied_light", sa.Integer, nullable=False),
        sa.Column("applied_heavy", sa.Integer, nullable=False),
        sa.Column("switches", JSONB, nullable=False),
    )
    op.create_index("ix_cascade_decisions_decided_at", "cascade_decisions", ["decided_at"])


def downgrade() -> None:
    op.drop_index("ix_cascade_decisions_decided_at", "cascade_decisions")
    op.drop_table("cascade_decisions")
    op.drop_index("ix_discriminators_light_model", "discriminators")
    op.drop_table("discriminators")
    op.execute("UPDATE jobs SET route = 'miss' WHERE route = 'heavy'")
    op.drop_constraint("ck_jobs_route", "jobs", type_="check")
    op.create_check_constraint("ck_jobs_route", "jobs", "route IS NULL OR route IN ('hit','miss')")
    op.drop_column("jobs", "cascade")
