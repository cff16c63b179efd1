"""The judge's quality of a job's image (the quality lab): set where the lab's models run.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for every earlier job and wherever no judge runs (real models, tiny random ones).
    op.add_column("jobs", sa.Column("quality", sa.Float, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "quality")
