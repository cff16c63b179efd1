"""What DiffServe's cascade remembers: each job's light stage, the discriminators, the allocator's
decisions. Functions flush at most; the caller owns the transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Float, cast, func, select, update
from sqlalchemy.orm import Session

from core.vocabulary import JobStatus, Route
from db.models import CascadeDecision, Discriminator, Job

KEEP_DISCRIMINATORS = 3  # versions kept per light model and feature kind


@dataclass(frozen=True, slots=True)
class LightStage:
    """A job's run on the light model and the discriminator's verdict (the job's `cascade` column).

    score: None when no discriminator was trained for the light model (the job was escalated, reason
    says so); escalated: whether the heavy model ran it after."""

    light_model: str
    light_evals: dict[str, int]
    light_ms: float
    score: float | None
    threshold: float
    escalated: bool
    discriminator_version: int | None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LightStage:
        return cls(**{name: data.get(name) for name in cls.__dataclass_fields__})  # type: ignore[arg-type]


def escalate(session: Session, job_id: uuid.UUID, *, owner: str, stage: LightStage) -> bool:
    """The lease holder hands a job the discriminator refused to the heavy model: the light stage is
    recorded, the lease released and the attempt given back (the heavy run counts its own), the route
    says heavy. False when this owner no longer holds the job (it did nothing: an earlier delivery
    escalated it, or the lease lapsed to another worker)."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.PROCESSING.value)
        .values(
            route=Route.HEAVY.value,
            cascade=stage.as_json(),
            status=JobStatus.STARTING.value,
            lease_owner=None,
            lease_until=None,
            attempts=Job.attempts - 1,
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def record_light_stage(session: Session, job_id: uuid.UUID, *, owner: str, stage: LightStage) -> bool:
    """The light stage of a job the light model completes (with the completion, by its lease holder)."""
    result = session.execute(
        update(Job).where(Job.id == job_id, Job.lease_owner == owner).values(cascade=stage.as_json())
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def light_stage(session: Session, job_id: uuid.UUID) -> LightStage | None:
    data = session.scalar(select(Job.cascade).where(Job.id == job_id))
    return LightStage.from_json(data) if data else None


def scores_since(session: Session, since: datetime, *, limit: int = 5000) -> list[float]:
    """The discriminator's scores of the light stages of jobs admitted since `since` (f(t) measured)."""
    score = cast(Job.cascade["score"].astext, Float)
    rows = session.scalars(
        select(score)
        .where(Job.admitted_at >= since, Job.cascade.is_not(None), score.is_not(None))
        .limit(limit)
    )
    return [float(value) for value in rows]


@dataclass(frozen=True, slots=True)
class CascadeCounts:
    light: int  # jobs the light model ran
    escalated: int  # of which the heavy model ran after


def cascade_counts(session: Session, since: datetime) -> CascadeCounts:
    escalated = Job.cascade["escalated"].astext == "true"
    row = session.execute(
        select(func.count(), func.count().filter(escalated)).where(
            Job.admitted_at >= since, Job.cascade.is_not(None)
        )
    ).one()
    return CascadeCounts(light=int(row[0]), escalated=int(row[1]))


# --- discriminators -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredDiscriminator:
    version: int
    light_model: str
    heavy_model: str
    features: str
    accuracy: float
    report: dict[str, Any]
    model: bytes


def save_discriminator(
    session: Session,
    *,
    light_model: str,
    heavy_model: str,
    features: str,
    accuracy: float,
    report: dict[str, Any],
    model: bytes,
    keep: int = KEEP_DISCRIMINATORS,
) -> int:
    """Store a new version and prune the oldest beyond `keep`; its version."""
    row = Discriminator(
        light_model=light_model,
        heavy_model=heavy_model,
        features=features,
        accuracy=accuracy,
        report=report,
        model=model,
    )
    session.add(row)
    session.flush()
    versions = session.scalars(
        select(Discriminator.version)
        .where(Discriminator.light_model == light_model, Discriminator.features == features)
        .order_by(Discriminator.version.desc())
    ).all()
    for old in versions[keep:]:
        stale = session.get(Discriminator, old)
        if stale is not None:
            session.delete(stale)
    return int(row.version)


def latest_discriminator_version(session: Session, *, light_model: str, features: str) -> int | None:
    return session.scalar(
        select(func.max(Discriminator.version)).where(
            Discriminator.light_model == light_model, Discriminator.features == features
        )
    )


def discriminator_summary(session: Session, *, light_model: str, features: str) -> dict[str, Any] | None:
    """{version, accuracy, features} of the newest discriminator, without its model and report."""
    row = session.execute(
        select(Discriminator.version, Discriminator.accuracy)
        .where(Discriminator.light_model == light_model, Discriminator.features == features)
        .order_by(Discriminator.version.desc())
        .limit(1)
    ).first()
    return None if row is None else {"version": int(row[0]), "accuracy": float(row[1]), "features": features}


def latest_discriminator(session: Session, *, light_model: str, features: str) -> StoredDiscriminator | None:
    row = session.scalars(
        select(Discriminator)
        .where(Discriminator.light_model == light_model, Discriminator.features == features)
        .order_by(Discriminator.version.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return StoredDiscriminator(
        row.version, row.light_model, row.heavy_model, row.features, row.accuracy, dict(row.report), row.model
    )


# --- the allocator's decisions ---------------------------------------------------------------------


def add_decision(session: Session, decision: CascadeDecision) -> CascadeDecision:
    session.add(decision)
    return decision


def latest_decision(session: Session) -> CascadeDecision | None:
    return session.scalars(select(CascadeDecision).order_by(CascadeDecision.id.desc()).limit(1)).first()


def recent_decisions(session: Session, limit: int = 20) -> list[CascadeDecision]:
    return list(session.scalars(select(CascadeDecision).order_by(CascadeDecision.id.desc()).limit(limit)))


def current_threshold(session: Session, *, default: float) -> tuple[float, str]:
    """The threshold light workers apply: the allocator's latest, else the configured one; and which."""
    decision = latest_decision(session)
    if decision is None:
        return default, "configured"
    return float(decision.threshold), f"decision {decision.id}"
