"""Eviction that scales, continued: per-scope byte counters, a blob-deletion outbox, and the
indexes a pass's deletions need.

- `cache_scope_bytes` holds every scope's bytes (entries' own plus their states', live or dirty),
  kept by triggers on cache_entries and cache_states in the same transaction as the rows: the budget
  check before every insertion (NIRVANA 5.4) and an eviction pass read one row instead of summing the
  scope (0.1 to 0.3 s at 100k entries, twice a pass). Statement-level triggers with transition tables
  add one upsert per statement and scope, whatever the rows; a byte change by UPDATE (rare) is a row
  trigger. TRUNCATE of cache_entries empties the counters.
- `blob_deletions`: an eviction pass deletes its victims' rows at once (a DELETE touches no index,
  where marking them dirty updated an indexed column and re-inserted each row into the HNSW graph,
  ~2 ms a row) and records their blobs here in the same transaction (one row a pass); the blobs are
  deleted after the commit, then the row. A crash in between leaves the row, which beat's next
  eviction run drains: nothing leaks.
- `jobs.source_entry_id` references cache_entries ON DELETE SET NULL: without an index every deleted
  entry scanned the jobs table.
- A partial index on dirty entries: a pass finds the (few) dirty entries without reading the scope.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_ADD = """
CREATE FUNCTION cache_scope_bytes_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cache_scope_bytes AS c (scope, bytes)
    SELECT scope, sum(bytes) FROM new_rows WHERE scope IS NOT NULL GROUP BY scope ORDER BY scope
    ON CONFLICT (scope) DO UPDATE SET bytes = c.bytes + EXCLUDED.bytes;
    RETURN NULL;
END
$$
"""

_SUBTRACT = """
CREATE FUNCTION cache_scope_bytes_subtract() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cache_scope_bytes c SET bytes = c.bytes - d.total
    FROM (SELECT scope, sum(bytes) AS total FROM old_rows WHERE scope IS NOT NULL GROUP BY scope) d
    WHERE c.scope = d.scope AND d.total <> 0;
    RETURN NULL;
END
$$
"""

_CHANGE = """
CREATE FUNCTION cache_scope_bytes_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cache_scope_bytes AS c (scope, bytes) VALUES (NEW.scope, NEW.bytes - OLD.bytes)
    ON CONFLICT (scope) DO UPDATE SET bytes = c.bytes + EXCLUDED.bytes;
    RETURN NULL;
END
$$
"""

_EMPTY = """
CREATE FUNCTION cache_scope_bytes_empty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cache_scope_bytes;
    RETURN NULL;
END
$$
"""

_BACKFILL = """
INSERT INTO cache_scope_bytes (scope, bytes)
SELECT scope, sum(bytes) FROM (
    SELECT scope, bytes FROM cache_entries UNION ALL SELECT scope, bytes FROM cache_states
) t WHERE scope IS NOT NULL GROUP BY scope
"""

_FUNCTIONS = ("add", "subtract", "change", "empty")


def _triggers(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER {table}_bytes_add AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION cache_scope_bytes_add()",
        f"CREATE TRIGGER {table}_bytes_subtract AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION cache_scope_bytes_subtract()",
        f"CREATE TRIGGER {table}_bytes_change AFTER UPDATE OF bytes ON {table} FOR EACH ROW "
        "WHEN (OLD.bytes IS DISTINCT FROM NEW.bytes) EXECUTE FUNCTION cache_scope_bytes_change()",
    ]


def upgrade() -> None:
    op.create_table(
        "cache_scope_bytes",
        sa.Column("scope", sa.String(64), primary_key=True),
        sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
    )
    for sql in (_ADD, _SUBTRACT, _CHANGE, _EMPTY):
        op.execute(sql)
    # Counters and rows change together from here on: lock both tables while the counts are taken.
    op.execute("LOCK TABLE cache_entries, cache_states IN SHARE ROW EXCLUSIVE MODE")
    for table in ("cache_entries", "cache_states"):
        for sql in _triggers(table):
            op.execute(sql)
    op.execute(
        "CREATE TRIGGER cache_entries_bytes_empty AFTER TRUNCATE ON cache_entries "
        "FOR EACH STATEMENT EXECUTE FUNCTION cache_scope_bytes_empty()"
    )
    op.execute(_BACKFILL)

    # One row a pass: its keys and prefixes as arrays (a pass evicting 7,000 states writes one row).
    op.create_table(
        "blob_deletions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("keys", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("prefixes", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index(
        "ix_jobs_source_entry_id",
        "jobs",
        ["source_entry_id"],
        postgresql_where=sa.text("source_entry_id IS NOT NULL"),
    )
    op.create_index(
        "ix_cache_entries_dirty", "cache_entries", ["scope"], postgresql_where=sa.text("state = 'dirty'")
    )


def downgrade() -> None:
    op.drop_index("ix_cache_entries_dirty", table_name="cache_entries")
    op.drop_index("ix_jobs_source_entry_id", table_name="jobs")
    op.drop_table("blob_deletions")
    op.execute("DROP TRIGGER cache_entries_bytes_empty ON cache_entries")
    for table in ("cache_entries", "cache_states"):
        for name in ("add", "subtract", "change"):
            op.execute(f"DROP TRIGGER {table}_bytes_{name} ON {table}")
    for name in _FUNCTIONS:
        op.execute(f"DROP FUNCTION cache_scope_bytes_{name}()")
    op.drop_table("cache_scope_bytes")
