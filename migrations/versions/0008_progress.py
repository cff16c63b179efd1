"""A job's progress and its place in the queue.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The running job's last reported step of its schedule, and the schedule's T (workers.progress).
    op.add_column("jobs", sa.Column("progress_step", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("progress_total", sa.Integer, nullable=True))
    # queue_position counts the jobs waiting ahead on the same route: only waiting jobs are indexed.
    op.create_index(
        "ix_jobs_waiting",
        "jobs",
        ["route", "admitted_at", "created_at"],
        postgresql_where=sa.text("status = 'starting'"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting", table_name="jobs")
    op.drop_column("jobs", "progress_total")
    op.drop_column("jobs", "progress_step")
