"""A job's life on the workers: admission, claiming a run under a lease, completion, failure.

Every change is conditional on the row's current state, so a redelivered task (at-least-once
delivery) never runs a job twice at once, never completes it twice, and never revives a job that
ended. The functions take a session and leave committing to the caller.

Leases are timed by the database's clock (`now()`, the transaction's start), never a worker's: a
worker whose clock runs ahead cannot take a live lease from another, nor one behind keep a lapsed one.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import func, literal, select, text, update
from sqlalchemy.orm import Session

from core.vocabulary import TERMINAL_STATUSES, AdmissionOutcome, JobStatus, Route
from db.models import Job


def utcnow() -> datetime:
    return datetime.now(UTC)


def database_now(session: Session) -> datetime:
    """The database's clock: `now()`, the start of the session's transaction."""
    now: datetime = session.execute(select(func.now())).scalar_one()
    return now


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"  # this worker runs it now
    DONE = "done"  # ended already (succeeded, failed, canceled): nothing to do
    LEASED = "leased"  # another worker holds a live lease: try again when it expires
    CANCELED = "canceled"  # cancel was requested before it started: now canceled
    EXHAUSTED = "exhausted"  # too many attempts: now failed with the reason
    MISSING = "missing"  # no such job (deleted with its tenant)
    MOVED = "moved"  # its route changed since this task was sent (a cascade escalated it): not this task's


@dataclass(frozen=True)
class Claim:
    outcome: ClaimOutcome
    job: Job | None = None
    retry_in_s: float = 0.0
    first_start: bool = False  # CLAIMED, and no run of the job started before (generation.started)


def claim_run(
    session: Session,
    job_id: uuid.UUID,
    *,
    owner: str,
    lease_s: float,
    max_attempts: int,
    refuse_routes: Collection[str] = (),
) -> Claim:
    """Take the job for one run attempt under a lease of lease_s seconds.

    Counts the attempt on the row; past max_attempts the job fails with a reason instead. A job whose
    route is in `refuse_routes` is not this task's any more (MOVED): a light stage redelivered after
    the cascade escalated the job must not run again.
    """
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        return Claim(ClaimOutcome.MISSING)
    if job.status in TERMINAL_STATUSES:
        return Claim(ClaimOutcome.DONE, job)
    if job.route in refuse_routes:
        return Claim(ClaimOutcome.MOVED, job)
    now = database_now(session)
    if job.cancel_requested:
        _end(job, JobStatus.CANCELED, now, error=None)
        return Claim(ClaimOutcome.CANCELED, job)
    if job.lease_owner not in (None, owner) and job.lease_until is not None and job.lease_until > now:
        return Claim(ClaimOutcome.LEASED, job, retry_in_s=(job.lease_until - now).total_seconds() + 1.0)
    if job.attempts >= max_attempts:
        _end(job, JobStatus.FAILED, now, error=_gave_up(job))
        return Claim(ClaimOutcome.EXHAUSTED, job)
    first_start = job.started_at is None  # not attempts == 1: a reroute to miss gives the attempt back
    job.error = None  # the run's own error, should it fail (record_run_error)
    job.attempts += 1
    job.status = JobStatus.PROCESSING.value
    job.started_at = job.started_at or now
    job.lease_owner = owner
    job.lease_until = now + timedelta(seconds=lease_s)
    job.progress_step = job.progress_total = None  # this run reports its own
    return Claim(ClaimOutcome.CLAIMED, job, first_start=first_start)


def _gave_up(job: Job) -> str:
    if job.error:  # the last run raised (a full disk, an unreadable blob...): its reason
        return f"gave up after {job.attempts} attempts; the last failed with: {job.error}"
    return f"gave up after {job.attempts} attempts (the worker running it died or timed out each time)"


def record_run_error(session: Session, job_id: uuid.UUID, *, owner: str, error: str) -> bool:
    """The lease holder's run raised `error`. The job stays running until its lease lapses and the
    reconciler sends it again, as after a crash; the error is what it fails with if that was its last
    attempt. Returns whether the owner still held the job."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.PROCESSING.value)
        .values(error=error[:ERROR_CHARS])
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


ERROR_CHARS = 500  # a run's error kept on the job: the exception's type and message, not a traceback


def renew_lease(session: Session, job_id: uuid.UUID, *, owner: str, lease_s: float) -> bool:
    """Extend a running job's lease to lease_s from now (the database's clock, as claim_run). False when
    this owner no longer holds it: the job ended, was rerouted, or another worker took it after a lapse."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.PROCESSING.value)
        .values(lease_until=func.now() + timedelta(seconds=lease_s))
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def record_admission(
    session: Session,
    job_id: uuid.UUID,
    *,
    outcome: str,
    predictor_said_hit: bool | None,
    route: str,
    similarity: float | None,
    k: int | None,
    source_entry_id: uuid.UUID | None,
    admission_ms: dict[str, float] | None = None,
    background_entry_id: uuid.UUID | None = None,
    video_hit: str | None = None,
) -> bool:
    """Write what admission decided, once, with its time per stage (embed, predict, lookup, total); a
    video hit's kind and a decoupled one's background entry. Returns False when the job is no longer
    waiting."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.STARTING.value, Job.cancel_requested.is_(False))
        .values(
            admission_outcome=outcome,
            predictor_said_hit=predictor_said_hit,
            route=route,
            similarity=similarity,
            k=k,
            source_entry_id=source_entry_id,
            background_entry_id=background_entry_id,
            video_hit=video_hit,
            admission_ms=admission_ms or {},
            # The transaction's clock, as db.stats counts the admission: a reroute to miss corrects
            # the interval that holds admitted_at.
            admitted_at=func.now(),
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class CountedHit:
    """A hit admission the interval statistics counted, now a miss: its k and when it was counted."""

    k: int
    admitted_at: datetime


def reroute_to_miss(session: Session, job_id: uuid.UUID, *, owner: str) -> CountedHit | None:
    """A hit that cannot run as one (its source was evicted, or it reached a worker of another latent
    family) runs as a miss: release the lease, give the attempt back, and say miss on the row.

    Returns the hit the statistics counted when this call turned it into a miss (the caller corrects
    them in the same transaction: db.stats.correct_hit_to_miss); None when the row was no hit of this
    lease holder (rerouted already by an earlier delivery, or leased by another worker)."""
    job = session.get(Job, job_id, with_for_update=True, populate_existing=True)
    if job is None or job.lease_owner != owner:
        return None
    was_hit = job.route == Route.HIT.value and job.admission_outcome == AdmissionOutcome.HIT.value
    counted = CountedHit(job.k, job.admitted_at) if was_hit and job.k and job.admitted_at else None
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner)
        .values(
            route="miss",
            k=None,
            source_entry_id=None,
            background_entry_id=None,  # a decoupled video hit's second source
            video_hit=None,
            admission_outcome="searched_miss",
            status=JobStatus.STARTING.value,
            lease_owner=None,
            lease_until=None,
            attempts=Job.attempts - 1,
            error=None,
        )
    )
    return counted


def complete(
    session: Session,
    job_id: uuid.UUID,
    *,
    owner: str,
    models_used: list[str],
    denoiser_evals: dict[str, int],
    final_latent_key: str,
    vae_decodes: int = 0,
    quality: float | None = None,
    stages_ms: dict[str, float] | None = None,
) -> bool:
    """Mark the run succeeded, with the VAE decodes its generation ran, the judge's quality of its
    image (where the lab's models run) and its time by stage (workers.stages). Only the lease holder's
    completion counts; returns whether it did."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.PROCESSING.value)
        .values(
            status=JobStatus.SUCCEEDED.value,
            models_used=models_used,
            denoiser_evals=denoiser_evals,
            final_latent_key=final_latent_key,
            vae_decodes=vae_decodes,
            quality=quality,
            stages_ms=stages_ms,
            finished_at=utcnow(),
            lease_until=None,
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def finish(session: Session, job_id: uuid.UUID, status: JobStatus, *, error: str | None) -> bool:
    """End a job that has not ended (failed with a reason, or canceled). Returns whether it changed."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.status in TERMINAL_STATUSES:
        return False
    _end(job, status, utcnow(), error=error)
    return True


def _end(job: Job, status: JobStatus, now: datetime, *, error: str | None) -> None:
    job.status = status.value
    job.error = error
    job.finished_at = now
    job.lease_until = None


def cancel_requested_among(session: Session, job_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
    """Of `job_ids`, those whose cancel was requested: one query for every run a worker holds."""
    if not job_ids:
        return set()
    rows = session.scalars(select(Job.id).where(Job.id.in_(list(job_ids)), Job.cancel_requested.is_(True)))
    return set(rows)


def record_progress_many(
    session: Session, reports: Sequence[tuple[uuid.UUID, str, int, int]]
) -> set[uuid.UUID]:
    """Several running jobs' progress in one statement: (job, owner, step, total) each; only each lease
    holder's run reports. Returns the jobs whose row it changed. One textual statement over arrays, so
    that it is compiled once and prepared by the driver, however many runs it reports."""
    if not reports:
        return set()
    ids, owners, steps, totals = (list(column) for column in zip(*reports, strict=True))
    changed = session.scalars(
        _PROGRESS_MANY,
        {
            "ids": ids,
            "owners": owners,
            "steps": steps,
            "totals": totals,
            "processing": JobStatus.PROCESSING.value,
        },
    )
    return set(changed)


_PROGRESS_MANY = text(
    "UPDATE jobs SET progress_step = reported.step, progress_total = reported.total "
    "FROM unnest(CAST(:ids AS uuid[]), CAST(:owners AS text[]), CAST(:steps AS integer[]), "
    "CAST(:totals AS integer[])) AS reported(job_id, owner, step, total) "
    "WHERE jobs.id = reported.job_id AND jobs.lease_owner = reported.owner AND jobs.status = :processing "
    "RETURNING jobs.id"
)


@dataclass(frozen=True)
class StuckJob:
    job_id: uuid.UUID
    admitted: bool
    route: str | None
    running: bool = False  # its lease expired (else: it waits, and its message may still be queued)
    priority: str = "normal"  # core.vocabulary.Priority: its messages are sent again at its step


def find_stuck(session: Session, *, older_than_s: float, limit: int = 2000) -> list[StuckJob]:
    """Jobs whose task may be lost (broker restart, worker death outside Celery's redelivery).

    Running jobs whose lease expired: a live run renews its lease every few seconds (workers.lease),
    so an expired one means the run died or lost us; they come first. Then waiting jobs untouched for
    older_than_s, the oldest first: the caller tells those whose message is still queued
    (jobs.broker_contents) from the lost.
    """
    now = database_now(session)
    cutoff = now - timedelta(seconds=older_than_s)
    expired = (
        select(Job.id, Job.admitted_at, Job.route, literal(True), Job.priority)
        .where(Job.status == JobStatus.PROCESSING.value, Job.lease_until < now)
        .limit(limit)
    )
    waiting = (
        select(Job.id, Job.admitted_at, Job.route, literal(False), Job.priority)
        .where(
            Job.status == JobStatus.STARTING.value,
            Job.created_at < cutoff,
            (Job.admitted_at.is_(None)) | (Job.admitted_at < cutoff),
        )
        .order_by(Job.created_at)
        .limit(limit)
    )
    rows = [*session.execute(expired).all(), *session.execute(waiting).all()][:limit]
    return [
        StuckJob(job_id=row[0], admitted=row[1] is not None, route=row[2], running=row[3], priority=row[4])
        for row in rows
    ]
