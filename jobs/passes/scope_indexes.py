"""Giving large scopes an HNSW index of their own (db/scope_indexes.py says why).

Beat runs it with the index-health pass (`reprise.check_indexes`, every REPRISE_INDEX_CHECK_PERIOD_S): a
scope with at least REPRISE_SCOPE_INDEX_MIN_ENTRIES live entries gets a partial HNSW index of the lookup
mode's embedding column, built CONCURRENTLY; a scope that shrank below half of that loses it (the
hysteresis keeps a scope near the bound from being rebuilt every pass). Until its index exists a scope is
searched as before: exactly when small, through the shared index otherwise.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from core.settings import Settings
from core.vocabulary import LookupMode
from db import scope_indexes as sql
from db.engine import session_scope

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScopeIndexReport:
    created: list[tuple[str, int, float]] = field(default_factory=list)  # (scope, live entries, seconds)
    dropped: list[str] = field(default_factory=list)  # scopes
    kept: int = 0

    @property
    def build_s(self) -> float:
        return round(sum(seconds for _, _, seconds in self.created), 2)


def indexed_column(settings: Settings) -> str:
    return "text_embedding" if settings.lookup_mode is LookupMode.TEXT_TO_TEXT else "image_embedding"


def check_scope_indexes(settings: Settings) -> ScopeIndexReport:
    """Create the missing scope indexes and drop those of scopes that shrank; what it did."""
    minimum = settings.scope_index_min_entries
    column = indexed_column(settings)
    with session_scope(settings) as session:
        existing = {index.scope: index for index in sql.scope_indexes(session) if index.column == column}
        large = sql.large_scopes(session, min_entries=minimum) if minimum > 0 else {}
        shrunk = [
            index
            for scope, index in existing.items()
            if scope not in large and (minimum == 0 or sql.live_entries(session, scope) < minimum // 2)
        ]
    report = ScopeIndexReport(kept=len(existing) - len(shrunk))
    for scope in sorted(set(large) - set(existing), key=lambda name: -large[name]):  # largest first
        started = time.perf_counter()
        sql.create_scope_index(settings.sqlalchemy_url, scope, column)
        seconds = round(time.perf_counter() - started, 2)
        report.created.append((scope, large[scope], seconds))
        log.info("indexed scope %s (%d entries) in %.1f s", scope, large[scope], seconds)
    for index in shrunk:
        sql.drop_scope_index(settings.sqlalchemy_url, index.name)
        report.dropped.append(index.scope)
        log.info("dropped the index of scope %s (below %d entries)", index.scope, minimum // 2)
    return report
