"""The retrain pass: refit the match predictor of every (scope, family) whose cache changed by more than
settings.predictor_retrain_change (NIRVANA 5.2: 5%) since its last fit, or that had
settings.predictor_retrain_inserts entries inserted since (a burst) -- jobs.policies.predictor.needs_retrain,
the rule the simulator applies too -- and load the newest fit. A fit stored in an older format is
refitted (and read as no fit meanwhile: the lookup is not skipped).

Each scope commits on its own and is safe to run twice at once (a (scope, family, mode) another run is
fitting is skipped). The SQL is db/predictor_store.py's; the model, jobs/policies/predictor.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import LookupMode
from db import predictor_store
from db.engine import session_scope
from jobs.policies.k_selection import configured_table
from jobs.policies.predictor import MAX_TRAINING_ROWS, MatchPredictor, fit_predictor, needs_retrain


@dataclass(frozen=True, slots=True)
class RetrainResult:
    scope: str
    model_family: str
    mode: LookupMode
    version: int
    entries: int


@dataclass(frozen=True, slots=True)
class LoadedPredictor:
    version: int
    entries: int
    predictor: MatchPredictor


def load_predictor(
    session: Session, *, scope: str, model_family: str, mode: LookupMode
) -> LoadedPredictor | None:
    """The newest fit, deserialised; None when there is none (then the lookup must not be skipped)."""
    fit = predictor_store.load_fit(session, scope=scope, model_family=model_family, mode=mode)
    if fit is None:
        return None
    try:
        predictor = MatchPredictor.from_bytes(fit.model)
    except ValueError:
        return None  # an older format: the next retrain pass replaces it
    return LoadedPredictor(fit.version, fit.entries, predictor)


def _changed_enough(
    session: Session, settings: Settings, *, scope: str, model_family: str, entries_now: int
) -> bool:
    """Whether the scope changed past the retrain threshold since its last fit (or was never fitted)."""
    mode = settings.lookup_mode
    fit = predictor_store.latest_fit(session, scope=scope, model_family=model_family, mode=mode)
    if fit is None:
        return entries_now > 0
    try:
        MatchPredictor.from_bytes(fit.model)
    except ValueError:
        return True  # stored in an older format
    added = predictor_store.live_entries(
        session, scope=scope, model_family=model_family, mode=mode, since=fit.fitted_at
    )
    removed = max(0, fit.entries + added - entries_now)
    return needs_retrain(
        fit.entries,
        entries_now,
        added + removed,
        added,
        change=settings.predictor_retrain_change,
        inserts=settings.predictor_retrain_inserts,
    )


def retrain_scope(
    session: Session, settings: Settings, *, scope: str, model_family: str, force: bool = False
) -> RetrainResult | None:
    """Refit one (scope, family) under the configured lookup mode when it changed enough, or when
    forced. Landmarks are the most recently used entries (jobs.policies.predictor). None: nothing to do.
    """
    mode = settings.lookup_mode
    if not predictor_store.try_lock_retrain(session, scope=scope, model_family=model_family, mode=mode):
        return None
    entries_now = predictor_store.live_entries(session, scope=scope, model_family=model_family, mode=mode)
    has_fit = predictor_store.latest_fit(session, scope=scope, model_family=model_family, mode=mode)
    if has_fit is None and entries_now == 0:
        return None
    if not force and not _changed_enough(
        session, settings, scope=scope, model_family=model_family, entries_now=entries_now
    ):
        return None
    vectors = predictor_store.recent_embeddings(
        session, scope=scope, model_family=model_family, mode=mode, limit=MAX_TRAINING_ROWS
    )
    dim = settings.text_embedding_dim if mode is LookupMode.TEXT_TO_TEXT else settings.image_embedding_dim
    embeddings = np.asarray([np.asarray(v, dtype=np.float32) for v in vectors], dtype=np.float32).reshape(
        -1, dim
    )
    predictor = fit_predictor(
        embeddings,
        threshold=configured_table(settings).lowest_similarity,
        dim=dim,
        nu=settings.predictor_nu,  # None: chosen on held-out data
    )
    saved = predictor_store.save_fit(
        session,
        scope=scope,
        model_family=model_family,
        mode=mode,
        entries=entries_now,
        model=predictor.to_bytes(),
    )
    return RetrainResult(scope, model_family, mode, saved.version, entries_now)


def retrain_predictors(settings: Settings, *, force: bool = False) -> list[RetrainResult]:
    """Retrain every (scope, family) that changed enough. Does nothing when the predictor is disabled."""
    if not settings.predictor_enabled:
        return []
    with session_scope(settings) as session:
        targets = predictor_store.retrain_targets(session, settings.lookup_mode)
    results: list[RetrainResult] = []
    for scope, model_family in targets:
        with session_scope(settings) as session:
            result = retrain_scope(session, settings, scope=scope, model_family=model_family, force=force)
        if result is not None:
            results.append(result)
    return results
