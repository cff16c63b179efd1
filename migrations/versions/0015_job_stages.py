"""Where a job's run spent its time: stages_ms on jobs, stage -> milliseconds of the run's worker
(workers.stages: reading the cached item, the model's calls, scoring, storing, filling the cache,
the completion), so a job's device time and the platform's are told apart per job.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("stages_ms", JSONB, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "stages_ms")
