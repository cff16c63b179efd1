"""The plain functions the maintenance beat tasks call: eviction of every scope and predictor retraining.

Each opens its own transactions from `settings` and is safe to run twice at once (eviction locks
per scope; retraining skips a (scope, family, mode) another run is fitting).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import EntryState, LookupMode
from db import predictor_store
from db.blobs.base import BlobStore
from db.engine import session_scope
from db.eviction import EvictionReport, cache_scopes, evict_scope
from db.models import CacheEntry, PredictorFit
from jobs.policies.k_selection import parse_table
from jobs.policies.predictor import MAX_LANDMARKS, fit_predictor, needs_retrain


def evict_all_scopes(settings: Settings, blob_store: BlobStore) -> list[EvictionReport]:
    """One eviction pass over every scope (NIRVANA 5.4's cache-maintainer, run in the background)."""
    with session_scope(settings) as session:
        scopes = cache_scopes(session)
    return [evict_scope(settings, blob_store, scope=scope) for scope in scopes]


@dataclass(frozen=True, slots=True)
class RetrainResult:
    scope: str
    model_family: str
    mode: LookupMode
    version: int
    entries: int


def _live(scope: str, model_family: str, mode: LookupMode) -> tuple[ColumnElement[bool], ...]:
    column = CacheEntry.text_embedding if mode is LookupMode.TEXT_TO_TEXT else CacheEntry.image_embedding
    return (
        CacheEntry.scope == scope,
        CacheEntry.model_family == model_family,
        CacheEntry.state == EntryState.LIVE.value,
        column.is_not(None),
    )


def _targets(session: Session, mode: LookupMode) -> list[tuple[str, str]]:
    """(scope, family) pairs with live entries, or with a fit (a scope emptied since needs a fit too)."""
    with_entries = session.execute(
        select(CacheEntry.scope, CacheEntry.model_family)
        .where(CacheEntry.state == EntryState.LIVE.value)
        .distinct()
    )
    with_fits = session.execute(
        select(PredictorFit.scope, PredictorFit.model_family)
        .where(PredictorFit.mode == mode.value)
        .distinct()
    )
    return sorted(set(with_entries) | set(with_fits))


def _try_lock(session: Session, scope: str, model_family: str, mode: LookupMode) -> bool:
    key = f"reprise.retrain:{scope}:{model_family}:{mode.value}"
    return bool(session.scalar(select(func.pg_try_advisory_xact_lock(func.hashtextextended(key, 0)))))


def retrain_scope(
    session: Session, settings: Settings, *, scope: str, model_family: str, force: bool = False
) -> RetrainResult | None:
    """Refit one (scope, family) under the configured lookup mode when it changed by more than
    settings.predictor_retrain_change (NIRVANA 5.2: 5%) since its last fit, or when forced.
    Landmarks are the most recently used entries (jobs.policies.predictor). None: nothing to do.
    """
    mode = settings.lookup_mode
    if not _try_lock(session, scope, model_family, mode):
        return None
    live = _live(scope, model_family, mode)
    entries_now = int(session.scalar(select(func.count()).select_from(CacheEntry).where(*live)) or 0)
    fit = predictor_store.latest_fit(session, scope=scope, model_family=model_family, mode=mode)
    if fit is None and entries_now == 0:
        return None
    if fit is not None and not force:
        added = int(
            session.scalar(
                select(func.count())
                .select_from(CacheEntry)
                .where(*live, CacheEntry.created_at > fit.fitted_at)
            )
            or 0
        )
        removed = max(0, fit.entries + added - entries_now)
        if not needs_retrain(
            fit.entries, entries_now, added + removed, change=settings.predictor_retrain_change
        ):
            return None
    column = CacheEntry.text_embedding if mode is LookupMode.TEXT_TO_TEXT else CacheEntry.image_embedding
    vectors = session.scalars(
        select(column).where(*live).order_by(CacheEntry.last_access_at.desc()).limit(MAX_LANDMARKS)
    ).all()
    dim = settings.text_embedding_dim if mode is LookupMode.TEXT_TO_TEXT else settings.image_embedding_dim
    embeddings = np.asarray([np.asarray(v, dtype=np.float32) for v in vectors], dtype=np.float32).reshape(
        -1, dim
    )
    predictor = fit_predictor(
        embeddings,
        threshold=parse_table(settings.k_table).lowest_similarity,
        dim=dim,
        nu=settings.predictor_nu,
    )
    saved = predictor_store.save_fit(
        session, scope=scope, model_family=model_family, mode=mode, entries=entries_now, predictor=predictor
    )
    return RetrainResult(scope, model_family, mode, saved.version, entries_now)


def retrain_predictors(settings: Settings, *, force: bool = False) -> list[RetrainResult]:
    """Retrain every (scope, family) whose cache changed by more than 5% since its fit (NIRVANA 5.2).
    Does nothing when the predictor is disabled. Each scope commits on its own."""
    if not settings.predictor_enabled:
        return []
    with session_scope(settings) as session:
        targets = _targets(session, settings.lookup_mode)
    results: list[RetrainResult] = []
    for scope, model_family in targets:
        with session_scope(settings) as session:
            result = retrain_scope(session, settings, scope=scope, model_family=model_family, force=force)
        if result is not None:
            results.append(result)
    return results
