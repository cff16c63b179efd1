"""HNSW indexes of one scope each: partial indexes (`WHERE scope = '<scope>'`) of the cache's embedding
column, for scopes too large for the exact path.

One shared HNSW index serves every scope by filtering while it walks; for a scope holding a small share of
a large table the walk visits mostly other scopes' entries and can stop at a wrong one: at 1M entries over
1001 scopes, lookups in scopes of 2k to 100k entries found their nearest entry 0.54 to 0.90 of the time
with ef_search 40 to 160 (`bench/results/cache/c1m-s1000.json`). A scope's own index holds only its
entries. Postgres picks it for a lookup naming that one scope (db.cache.lookup queries scope by scope, with
custom plans). Each index carries its scope in its comment; jobs.passes.index_health creates and drops
them CONCURRENTLY (lookups and inserts go on).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from db.engine import engine_for

PREFIX: Final = "ix_cache_scope_"
COLUMNS: Final = ("text_embedding", "image_embedding")


@dataclass(frozen=True, slots=True)
class ScopeIndex:
    name: str
    scope: str
    column: str
    index_bytes: int


def scope_index_name(scope: str, column: str) -> str:
    """A stable name within Postgres' 63 bytes: the column's initial and a hash of the scope."""
    if column not in COLUMNS:
        raise ValueError(f"not an embedding column: {column}")
    return f"{PREFIX}{column[0]}_{hashlib.sha256(scope.encode()).hexdigest()[:24]}"


def scope_indexes(session: Session) -> list[ScopeIndex]:
    """The scope indexes that exist and are valid (a CONCURRENTLY build that failed leaves an invalid
    one, which create_scope_index replaces)."""
    rows = session.execute(
        text(
            "SELECT c.relname, obj_description(c.oid, 'pg_class'), a.attname, pg_relation_size(c.oid) "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = 'cache_entries'::regclass AND i.indisvalid AND c.relname LIKE :prefix"
        ),
        {"prefix": PREFIX + "%"},
    ).all()
    return [ScopeIndex(name, scope or "", column, int(size)) for name, scope, column, size in rows]


def large_scopes(session: Session, *, min_entries: int) -> dict[str, int]:
    """Scopes holding at least `min_entries` live entries, with their counts (one scan of the scope index)."""
    rows = session.execute(
        text(
            "SELECT scope, count(*) FROM cache_entries WHERE state = 'live' GROUP BY scope "
            "HAVING count(*) >= :n"
        ),
        {"n": min_entries},
    ).all()
    return {scope: int(count) for scope, count in rows}


def live_entries(session: Session, scope: str) -> int:
    query = "SELECT count(*) FROM cache_entries WHERE scope = :scope AND state = 'live'"
    return int(session.scalar(text(query), {"scope": scope}) or 0)


def create_scope_index(database_url: str, scope: str, column: str) -> str:
    """Build `scope`'s HNSW index of `column` beside the table's work (CREATE INDEX CONCURRENTLY), after
    dropping an invalid one a failed build left; its name."""
    name = scope_index_name(scope, column)
    engine = engine_for(database_url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        invalid = connection.execute(
            text("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"), {"name": name}
        ).scalar()
        if invalid:
            connection.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
        literal = connection.execute(
            text("SELECT quote_literal(CAST(:scope AS text))"), {"scope": scope}
        ).scalar()
        connection.execute(
            text(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON cache_entries "
                f"USING hnsw ({column} vector_cosine_ops) WHERE scope = {literal}"
            )
        )
        connection.execute(text(f"COMMENT ON INDEX {name} IS {literal}"))
    return name


def drop_scope_index(database_url: str, name: str) -> None:
    if not name.startswith(PREFIX):
        raise ValueError(f"not a scope index: {name}")
    engine = engine_for(database_url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
