"""Eviction that scales: ordered indexes for FIFO, LRU and LFU, a random key for sampling.

An eviction pass reads its victims in index order (FIFO, LRU, LFU) or from a random sample of the
scope (LCBFU, LRBU, db/eviction.py), instead of ranking every unit of the scope:
- cache_states gets its entry's scope (filled by a trigger on insert, backfilled here), so one
  btree walks a scope's states in LRU or LFU order without reading other scopes';
- cache_entries gets `sample_key`, uniform in [0, 1) and fixed at insert: a range of it is a
  uniformly random subset of the scope's entries, read through one index.
The indexes on cache_entries hold immutable columns only (scope, created_at, sample_key, state):
record_use updates last_access_at and access_count on every hit, and an index on either would
make those updates non-HOT, each inserting a new tuple into the HNSW index.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_FILL_SCOPE = """
CREATE FUNCTION cache_states_fill_scope() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.scope IS NULL THEN
        SELECT e.scope INTO NEW.scope FROM cache_entries e WHERE e.id = NEW.entry_id;
    END IF;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.add_column("cache_states", sa.Column("scope", sa.String(64), nullable=True))
    op.execute(_FILL_SCOPE)
    op.execute(
        "CREATE TRIGGER cache_states_fill_scope BEFORE INSERT ON cache_states "
        "FOR EACH ROW EXECUTE FUNCTION cache_states_fill_scope()"
    )
    op.execute("UPDATE cache_states s SET scope = e.scope FROM cache_entries e WHERE e.id = s.entry_id")
    # LRU and LFU over states, with the planner's tie-breaks (jobs.policies.eviction._order_key).
    op.create_index(
        "ix_cache_states_lru", "cache_states", ["scope", "last_access_at", "created_at", "k", "entry_id"]
    )
    op.create_index(
        "ix_cache_states_lfu", "cache_states", ["scope", "access_count", "created_at", "k", "entry_id"]
    )
    live = sa.text("state = 'live'")
    # FIFO over whole entries (MoDM 5.4), and the bound on state-less entries under LRU.
    op.create_index(
        "ix_cache_entries_fifo", "cache_entries", ["scope", "created_at", "id"], postgresql_where=live
    )
    # random() is volatile: the column is rewritten row by row, each entry gets its own key.
    op.add_column(
        "cache_entries",
        sa.Column("sample_key", sa.Float(precision=53), nullable=False, server_default=sa.text("random()")),
    )
    op.create_index(
        "ix_cache_entries_sample", "cache_entries", ["scope", "sample_key"], postgresql_where=live
    )


def downgrade() -> None:
    op.drop_index("ix_cache_entries_sample", table_name="cache_entries")
    op.drop_column("cache_entries", "sample_key")
    op.drop_index("ix_cache_entries_fifo", table_name="cache_entries")
    op.drop_index("ix_cache_states_lfu", table_name="cache_states")
    op.drop_index("ix_cache_states_lru", table_name="cache_states")
    op.execute("DROP TRIGGER cache_states_fill_scope ON cache_states")
    op.execute("DROP FUNCTION cache_states_fill_scope()")
    op.drop_column("cache_states", "scope")
