"""Where a job's run spent its time, and an entry's text embedding only where a lookup reads it.

- jobs.stages_ms: stage -> milliseconds of the run's worker (workers.stages: reading the cached item,
  the model's calls, scoring, storing, filling the cache, the completion), so a job's device time and
  the platform's are told apart per job.
- cache_entries.text_embedding may be null: an image entry cached while the lookup reads images (MoDM
  5.2) is embedded in image space only, as an entry cached in text mode has no image embedding; each
  is found by the lookup of its mode (an HNSW index leaves null vectors out).

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
    op.alter_column("cache_entries", "text_embedding", nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM cache_entries WHERE text_embedding IS NULL")  # entries of no text lookup
    op.alter_column("cache_entries", "text_embedding", nullable=False)
    op.drop_column("jobs", "stages_ms")
