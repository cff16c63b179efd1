"""The cache's HNSW indexes (the shared ones and the scopes' own) as Postgres sees them: their size, the
rows they index, and a rebuild that does not stop lookups (REINDEX CONCURRENTLY).
jobs.passes.index_health decides when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from db.engine import engine_for
from db.scope_indexes import PREFIX as SCOPE_INDEX_PREFIX
from db.scope_indexes import scope_indexes

# (index, its column): the migrations' names (0001_initial).
HNSW_INDEXES: Final = (
    ("ix_cache_entries_text_embedding_hnsw", "text_embedding"),
    ("ix_cache_entries_image_embedding_hnsw", "image_embedding"),
)


@dataclass(frozen=True, slots=True)
class IndexSize:
    index: str
    column: str
    index_bytes: int
    rows: int  # rows with an embedding in this column, live or dirty: what a fresh build would hold


def index_sizes(session: Session) -> list[IndexSize]:
    """The shared HNSW indexes and every scope's own (db/scope_indexes.py), with the rows each holds."""
    sizes = []
    for index, column in HNSW_INDEXES:
        index_bytes, rows = session.execute(
            text(
                f"SELECT pg_relation_size(CAST(:index AS regclass)), "
                f"(SELECT count(*) FROM cache_entries WHERE {column} IS NOT NULL)"
            ),
            {"index": index},
        ).one()
        sizes.append(IndexSize(index, column, int(index_bytes), int(rows)))
    for own in scope_indexes(session):
        rows = session.scalar(
            text(f"SELECT count(*) FROM cache_entries WHERE scope = :scope AND {own.column} IS NOT NULL"),
            {"scope": own.scope},
        )
        sizes.append(IndexSize(own.name, own.column, own.index_bytes, int(rows or 0)))
    return sizes


def reindex_concurrently(database_url: str, index: str) -> None:
    """Rebuild `index` beside the old one and swap them: lookups and inserts go on meanwhile. Runs outside
    a transaction (Postgres requires it), on a connection of its own."""
    if index not in {name for name, _ in HNSW_INDEXES} and not index.startswith(SCOPE_INDEX_PREFIX):
        raise ValueError(f"not a cache index: {index}")
    engine = engine_for(database_url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f"REINDEX INDEX CONCURRENTLY {index}"))
