"""Match-predictor fits in Postgres (predictor_fits): versioned, newest wins, with quality counters.

A fit belongs to (scope, model_family, mode). Admit workers load the newest version and may keep
it in memory until a newer version appears (`latest_version` is a cheap check). The counters
compare the predictor with the real lookup: a predicted hit is searched, so its truth is known;
a predicted miss is not searched, so its truth is known only when the caller also searches it
(for instance a small audit sample of predicted misses), which is what recall needs.

Functions flush but do not commit: the caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.orm import Session

from core.vocabulary import EntryState, LookupMode
from db.models import CacheEntry, PredictorFit

KEEP_FITS = 2
"""Versions kept per (scope, family, mode): the newest, and the one workers may still be switching from."""


@dataclass(frozen=True, slots=True)
class StoredFit:
    """A fit as stored: its version, the live entries it was fitted on, the serialised model (the
    predictor's own versioned format, jobs.policies.predictor.MatchPredictor.to_bytes)."""

    version: int
    entries: int
    model: bytes


@dataclass(frozen=True, slots=True)
class FitQuality:
    """Confusion counts of one fit against the lookup it stood in for."""

    version: int
    true_pos: int
    false_pos: int
    false_neg: int
    true_neg: int

    @property
    def precision(self) -> float | None:
        """Predicted hits that were hits (NIRVANA's c_p)."""
        called = self.true_pos + self.false_pos
        return self.true_pos / called if called else None

    @property
    def recall(self) -> float | None:
        """Hits the predictor let through to the search."""
        actual = self.true_pos + self.false_neg
        return self.true_pos / actual if actual else None


def _key(scope: str, model_family: str, mode: LookupMode) -> tuple[ColumnElement[bool], ...]:
    return (
        PredictorFit.scope == scope,
        PredictorFit.model_family == model_family,
        PredictorFit.mode == mode.value,
    )


def save_fit(
    session: Session,
    *,
    scope: str,
    model_family: str,
    mode: LookupMode,
    entries: int,
    model: bytes,
    keep: int = KEEP_FITS,
) -> PredictorFit:
    """Store a new version (entries: live entries at fit time, for the 5% rule) and prune older ones."""
    fit = PredictorFit(scope=scope, model_family=model_family, mode=mode.value, entries=entries, model=model)
    session.add(fit)
    session.flush()
    stale = session.scalars(
        select(PredictorFit.version)
        .where(*_key(scope, model_family, mode))
        .order_by(PredictorFit.version.desc())
        .offset(keep)
    ).all()
    if stale:
        session.execute(delete(PredictorFit).where(PredictorFit.version.in_(stale)))
    return fit


def latest_fit(session: Session, *, scope: str, model_family: str, mode: LookupMode) -> PredictorFit | None:
    """The newest fit row, or None when the scope has never been fitted."""
    return session.scalars(
        select(PredictorFit)
        .where(*_key(scope, model_family, mode))
        .order_by(PredictorFit.version.desc())
        .limit(1)
    ).one_or_none()


def latest_version(session: Session, *, scope: str, model_family: str, mode: LookupMode) -> int | None:
    """The newest version number only (no model bytes): for workers checking whether to reload."""
    version = session.scalar(select(func.max(PredictorFit.version)).where(*_key(scope, model_family, mode)))
    return int(version) if version is not None else None


def load_fit(session: Session, *, scope: str, model_family: str, mode: LookupMode) -> StoredFit | None:
    """The newest fit; None when there is none (then the lookup must not be skipped)."""
    fit = latest_fit(session, scope=scope, model_family=model_family, mode=mode)
    if fit is None:
        return None
    return StoredFit(fit.version, fit.entries, fit.model)


def record_outcome(session: Session, *, version: int, predicted_hit: bool, actual_hit: bool) -> None:
    """Count one prediction against the real lookup's answer.

    An atomic increment; a version pruned meanwhile is ignored."""
    column = {
        (True, True): PredictorFit.true_pos,
        (True, False): PredictorFit.false_pos,
        (False, True): PredictorFit.false_neg,
        (False, False): PredictorFit.true_neg,
    }[(predicted_hit, actual_hit)]
    session.execute(update(PredictorFit).where(PredictorFit.version == version).values({column: column + 1}))


def fit_quality(session: Session, *, version: int) -> FitQuality | None:
    """The confusion counts of one version, or None if it no longer exists."""
    row = session.execute(
        select(
            PredictorFit.true_pos, PredictorFit.false_pos, PredictorFit.false_neg, PredictorFit.true_neg
        ).where(PredictorFit.version == version)
    ).one_or_none()
    return None if row is None else FitQuality(version, *row)


# --- what a retrain pass reads --------------------------------------------------------------------


def _live(scope: str, model_family: str, mode: LookupMode) -> tuple[ColumnElement[bool], ...]:
    return (
        CacheEntry.scope == scope,
        CacheEntry.model_family == model_family,
        CacheEntry.state == EntryState.LIVE.value,
        _embedding(mode).is_not(None),
    )


def _embedding(mode: LookupMode) -> ColumnElement[object]:
    column = CacheEntry.text_embedding if mode is LookupMode.TEXT_TO_TEXT else CacheEntry.image_embedding
    return column  # type: ignore[return-value]


def retrain_targets(session: Session, mode: LookupMode) -> list[tuple[str, str]]:
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
    return sorted({(scope, family) for scope, family in with_entries} | {(s, f) for s, f in with_fits})


def try_lock_retrain(session: Session, *, scope: str, model_family: str, mode: LookupMode) -> bool:
    """Take the (scope, family, mode) retrain lock for this transaction; False when another run holds it."""
    key = f"reprise.retrain:{scope}:{model_family}:{mode.value}"
    return bool(session.scalar(select(func.pg_try_advisory_xact_lock(func.hashtextextended(key, 0)))))


def live_entries(
    session: Session, *, scope: str, model_family: str, mode: LookupMode, since: datetime | None = None
) -> int:
    """Live entries with an embedding for `mode`; only those created after `since` when given."""
    query = select(func.count()).select_from(CacheEntry).where(*_live(scope, model_family, mode))
    if since is not None:
        query = query.where(CacheEntry.created_at > since)
    return int(session.scalar(query) or 0)


def recent_embeddings(
    session: Session, *, scope: str, model_family: str, mode: LookupMode, limit: int
) -> list[object]:
    """The embeddings of the `limit` most recently used live entries (pgvector values, as stored)."""
    return list(
        session.scalars(
            select(_embedding(mode))
            .where(*_live(scope, model_family, mode))
            .order_by(CacheEntry.last_access_at.desc())
            .limit(limit)
        ).all()
    )
