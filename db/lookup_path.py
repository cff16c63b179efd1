"""How one scope's nearest entry is searched: exactly, for a small scope, or by an HNSW walk
whose settings (ef_search by the index's size, pgvector 0.8's iterative scan) are set for the transaction
in the same round trip that chooses the path. db.cache.lookup calls choose_path before each scope's query."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Integer, Select, Text, case, cast, column, func, literal, select, table
from sqlalchemy.orm import Session

from core.vocabulary import EntryState
from db.models import CacheEntry

EF_SEARCH_MAX = 1000  # pgvector's largest hnsw.ef_search
_PG_CLASS = table("pg_class", column("oid"), column("reltuples"))


def scaled_ef(ef_search: int, entries: float, reference_entries: int) -> int:
    """The ef_search a walk of an index of `entries` tuples gets: ef_search up to `reference_entries`,
    in proportion to the size past it (recall@1 at a fixed ef falls with the graph's size: 0.998 / 0.930
    / 0.696 at 100k / 300k / 1M entries and ef 80, README 'Admission at scale'), at most pgvector's 1000.
    reference_entries 0: ef_search whatever the size. ScopeEf.sql computes the same in Postgres."""
    if reference_entries <= 0 or entries <= reference_entries:
        return ef_search
    return min(EF_SEARCH_MAX, math.ceil(ef_search * entries / reference_entries))


@dataclass(frozen=True, slots=True)
class ScopeEf:
    """A scope's ef_search as a SQL expression: scaled_ef over its own index's size in the catalog
    (pg_class.reltuples, kept by CREATE INDEX, VACUUM and ANALYZE; -1 or absent: not built or never
    counted, so ef_search)."""

    ef_search: int
    reference_entries: int
    index_name: str

    def sql(self) -> ColumnElement[str]:
        if self.reference_entries <= 0:
            return literal(str(int(self.ef_search)))
        tuples = (
            select(_PG_CLASS.c.reltuples)
            .where(_PG_CLASS.c.oid == func.to_regclass(self.index_name))
            .scalar_subquery()
        )
        scaled = func.least(EF_SEARCH_MAX, func.ceil(tuples * self.ef_search / self.reference_entries))
        grown = case((func.coalesce(tuples, -1) > self.reference_entries, scaled), else_=self.ef_search)
        return cast(cast(grown, Integer), Text)


def choose_path(session: Session, scope: str, exact_max: int, ef: ScopeEf, max_scan_tuples: int) -> bool:
    """One round trip before a scope's query: whether the scope is small enough for the exact path (a
    count of at most exact_max + 1 rows), and this transaction's settings for either path. Exact: no
    index scan (the scope's rows by a bitmap scan, sorted). Index: the scope's own HNSW index, which a
    custom plan picks for its literal scope, or the shared one filtered while it is walked; ef_search
    by the scope index's size (ScopeEf)."""
    bounded = bounded_count([scope], exact_max).scalar_subquery()
    small = (bounded <= exact_max) & (literal(exact_max) > 0)
    settings = {
        "hnsw.iterative_scan": "strict_order",
        "hnsw.max_scan_tuples": str(int(max_scan_tuples)),
        "plan_cache_mode": "force_custom_plan",  # a generic plan cannot match a partial index
    }
    row = session.execute(
        select(
            small,
            func.set_config("enable_indexscan", case((small, "off"), else_="on"), True),
            func.set_config("hnsw.ef_search", ef.sql(), True),
            *(func.set_config(name, value, True) for name, value in settings.items()),
        )
    ).one()
    return bool(row[0])


def bounded_count(scopes: Sequence[str], limit: int) -> Select[int]:
    """The live entries of `scopes`, counted no further than limit + 1 rows (the scope index)."""
    bounded = (
        select(literal(1))
        .select_from(CacheEntry)
        .where(CacheEntry.scope.in_(list(scopes)), CacheEntry.state == EntryState.LIVE.value)
        .limit(limit + 1)
        .subquery()
    )
    return select(func.count()).select_from(bounded)
