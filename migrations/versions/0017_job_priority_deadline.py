"""A job's priority and deadline (jobs.priority), and a tenant's cap on its unfinished `high` jobs.

jobs.priority (low | normal | high, default normal), jobs.deadline_s (seconds from created_at, null:
none) and jobs.on_deadline (fail | best_effort); tenants.high_limit (core.vocabulary.DEFAULT_HIGH_LIMIT),
checked at each create against a partial index of the tenant's unfinished `high` jobs.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("priority", sa.String(8), nullable=False, server_default="normal"))
    op.add_column("jobs", sa.Column("deadline_s", sa.Float(), nullable=True))
    op.add_column(
        "jobs", sa.Column("on_deadline", sa.String(16), nullable=False, server_default="best_effort")
    )
    op.create_check_constraint("ck_jobs_priority", "jobs", "priority IN ('low','normal','high')")
    op.create_check_constraint("ck_jobs_on_deadline", "jobs", "on_deadline IN ('fail','best_effort')")
    op.add_column("tenants", sa.Column("high_limit", sa.Integer(), nullable=False, server_default="8"))
    op.create_index(
        "ix_jobs_high_unfinished",
        "jobs",
        ["tenant_id"],
        postgresql_where=sa.text("priority = 'high' AND status IN ('starting', 'processing')"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_high_unfinished", table_name="jobs")
    op.drop_column("tenants", "high_limit")
    op.drop_constraint("ck_jobs_on_deadline", "jobs")
    op.drop_constraint("ck_jobs_priority", "jobs")
    op.drop_column("jobs", "on_deadline")
    op.drop_column("jobs", "deadline_s")
    op.drop_column("jobs", "priority")
