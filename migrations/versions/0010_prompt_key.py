"""The exact-prompt key of cache entries: identical requests skip the embedding; and
autovacuum settings for the cache tables, which delete rows all the time (eviction).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CACHE_TABLES = ("cache_entries", "cache_states")


def upgrade() -> None:
    # core.prompt_key's sha256 (hex). Entries cached before this revision have none: they are found by
    # their embedding, as before.
    op.add_column("cache_entries", sa.Column("prompt_key", sa.String(64), nullable=True))
    op.create_index(
        "ix_cache_entries_scope_prompt_key",
        "cache_entries",
        ["scope", "prompt_key"],
        postgresql_where=sa.text("state = 'live' AND prompt_key IS NOT NULL"),
    )
    # Postgres vacuums a table once 20% of its rows are dead (autovacuum_vacuum_scale_factor 0.2): a
    # million-entry cache would carry 200k dead tuples between vacuums. 2% keeps the heap and the
    # planner's statistics close to the live rows; the HNSW graph itself is jobs.passes.index_health's.
    for table in CACHE_TABLES:
        op.execute(
            f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.02, "
            "autovacuum_analyze_scale_factor = 0.02)"
        )


def downgrade() -> None:
    for table in CACHE_TABLES:
        op.execute(
            f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor)"
        )
    op.drop_index("ix_cache_entries_scope_prompt_key", table_name="cache_entries")
    op.drop_column("cache_entries", "prompt_key")
