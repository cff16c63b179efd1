"""Jobs as the API sees them: what a create asks for (NewJob) and its Idempotency-Key replay, read, list,
cancel. Every read is scoped by tenant: another tenant's job does not exist for you. The row itself is
written by the intake (db.job_intake, on asyncio), within the tenant's in-flight limit.

Functions flush but do not commit: the caller owns the transaction.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, case, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from core.errors import InvalidInput
from core.params import GenerationParams
from core.vocabulary import DecodeMode, JobStatus, OnDeadline, Priority
from db.models import Job, Tenant

ACTIVE_STATUSES = (JobStatus.STARTING.value, JobStatus.PROCESSING.value)


class IdempotencyConflict(InvalidInput):
    """The Idempotency-Key was used before with another body. Not recoverable: use a new key."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used with a different request body", field="Idempotency-Key"
        )


@dataclass(frozen=True, slots=True)
class NewJob:
    params: GenerationParams
    cache_mode: str = "auto"
    webhook_url: str | None = None
    webhook_events_filter: list[str] = field(default_factory=list)
    idempotency_key: str | None = None
    request_fingerprint: str | None = None  # sha256 of the canonical request body
    decode_mode: str = DecodeMode.LAZY  # core.vocabulary.DecodeMode
    priority: str = Priority.NORMAL  # core.vocabulary.Priority
    deadline_s: float | None = None
    on_deadline: str = OnDeadline.BEST_EFFORT  # core.vocabulary.OnDeadline


MISS_ROUTES = ("miss", "heavy")  # a cascade's escalated miss is routed "heavy": still a miss of the cache


def _by_idempotency_key(session: Session, tenant_id: uuid.UUID, key: str) -> Job | None:
    return session.scalars(
        select(Job)
        .where(Job.tenant_id == tenant_id, Job.idempotency_key == key)
        .execution_options(populate_existing=True)
    ).one_or_none()


def find_replay(*, session: Session, tenant_id: uuid.UUID, new: NewJob) -> Job | None:
    """The earlier job under new.idempotency_key, or None. IdempotencyConflict if its body differed."""
    if new.idempotency_key is None:
        return None
    existing = _by_idempotency_key(session, tenant_id, new.idempotency_key)
    if existing is not None and existing.request_fingerprint != new.request_fingerprint:
        raise IdempotencyConflict(new.idempotency_key)
    return existing


def count_active(*, session: Session, tenant_id: uuid.UUID) -> int:
    """Jobs of the tenant still starting or processing (what the in-flight limit counts)."""
    return (
        session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.tenant_id == tenant_id, Job.status.in_(ACTIVE_STATUSES))
        )
        or 0
    )


def get_job(*, session: Session, tenant_id: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    """The tenant's job, fresh from the database, or None (also when another tenant owns it, or it
    was deleted)."""
    return session.scalars(
        select(Job)
        .where(Job.id == job_id, Job.tenant_id == tenant_id, Job.deleted_at.is_(None))
        .execution_options(populate_existing=True)
    ).one_or_none()


# --- listing -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cursor:
    """Position after the last job of a page (newest first): (created_at, id) of that job."""

    created_at: datetime
    job_id: uuid.UUID

    def encode(self) -> str:
        raw = f"{self.created_at.isoformat()}|{self.job_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            created_at, _, job_id = raw.partition("|")
            cursor = cls(datetime.fromisoformat(created_at), uuid.UUID(job_id))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidInput("cursor is not one this API returned", field="cursor") from None
        if cursor.created_at.tzinfo is None:
            raise InvalidInput("cursor is not one this API returned", field="cursor")
        return cursor


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: Cursor | None


def list_jobs(
    *,
    session: Session,
    tenant_id: uuid.UUID,
    status: JobStatus | None = None,
    limit: int = 20,
    after: Cursor | None = None,
) -> JobPage:
    """The tenant's jobs, newest first, `limit` at a time; pass the page's next_cursor for the next."""
    query = select(Job).where(Job.tenant_id == tenant_id, Job.deleted_at.is_(None))
    if status is not None:
        query = query.where(Job.status == status.value)
    if after is not None:
        query = query.where(tuple_(Job.created_at, Job.id) < tuple_(after.created_at, after.job_id))
    rows = list(session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)))
    jobs = rows[:limit]
    next_cursor = Cursor(jobs[-1].created_at, jobs[-1].id) if len(rows) > limit else None
    return JobPage(jobs=jobs, next_cursor=next_cursor)


# --- cancel --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CancelResult:
    job: Job
    canceled_now: bool  # True when this call moved the job to 'canceled' (it was still 'starting')


def request_cancel(*, session: Session, tenant_id: uuid.UUID, job_id: uuid.UUID) -> CancelResult | None:
    """Ask a job to stop. A 'starting' job is canceled at once; a 'processing' one keeps running
    until its worker sees cancel_requested; a finished job is left as it is. None: no such job."""
    was_starting = Job.status == JobStatus.STARTING.value
    new_status = session.scalar(
        update(Job)
        .where(Job.id == job_id, Job.tenant_id == tenant_id, Job.status.in_(ACTIVE_STATUSES))
        .values(
            cancel_requested=True,
            status=case((was_starting, JobStatus.CANCELED.value), else_=Job.status),
            finished_at=case((was_starting, func.now()), else_=Job.finished_at),
        )
        .returning(Job.status)
        .execution_options(synchronize_session=False)
    )
    job = get_job(session=session, tenant_id=tenant_id, job_id=job_id)
    if job is None:
        return None
    return CancelResult(job=job, canceled_now=new_status == JobStatus.CANCELED.value)


# --- statistics ----------------------------------------------------------------------------------


def status_counts(
    *, session: Session, since: datetime | None = None, tenant_id: uuid.UUID | None = None
) -> dict[str, int]:
    """Jobs per status, of one tenant or (None) all tenants (for /v1/stats)."""
    query = select(Job.status, func.count()).group_by(Job.status)
    if since is not None:
        query = query.where(Job.created_at >= since)
    if tenant_id is not None:
        query = query.where(Job.tenant_id == tenant_id)
    return {status: count for status, count in session.execute(query)}


@dataclass(frozen=True, slots=True)
class CacheOutcomes:
    hits: int
    misses: int
    k_histogram: dict[int, int]
    steps_requested: int  # Σ T over admitted jobs: the all-large-model baseline, in steps
    steps_skipped: int  # Σ k over hits
    denoiser_evaluations: dict[str, int]  # model -> evaluations actually run
    hit_quality: float | None = None  # mean judge score of judged hits (the lab's models only)
    miss_quality: float | None = None
    judged: int = 0


def cache_outcomes(*, session: Session, since: datetime, tenant_id: uuid.UUID | None = None) -> CacheOutcomes:
    """Routing and compute accounting of the jobs admitted since `since`, of one tenant or (None) all."""
    admitted: tuple[ColumnElement[bool], ...] = (Job.created_at >= since, Job.route.is_not(None))
    if tenant_id is not None:
        admitted = (*admitted, Job.tenant_id == tenant_id)
    hits, misses, steps, skipped, hit_quality, miss_quality, judged = session.execute(
        select(
            func.count().filter(Job.route == "hit"),
            func.count().filter(Job.route.in_(MISS_ROUTES)),
            func.coalesce(func.sum(Job.steps), 0),
            func.coalesce(func.sum(Job.k).filter(Job.route == "hit"), 0),
            func.avg(Job.quality).filter(Job.route == "hit"),
            func.avg(Job.quality).filter(Job.route.in_(MISS_ROUTES)),
            func.count(Job.quality),
        ).where(*admitted)
    ).one()
    histogram = {
        k: int(n)
        for k, n in session.execute(
            select(Job.k, func.count())
            .where(*admitted, Job.route == "hit", Job.k.is_not(None))
            .group_by(Job.k)
        )
        if k is not None
    }
    evals = {
        str(model): int(total)
        for model, total in session.execute(
            text(
                "SELECT e.key, sum(e.value::bigint) FROM jobs, jsonb_each_text(jobs.denoiser_evals) AS e "
                "WHERE jobs.created_at >= :since "
                "AND (CAST(:tenant AS uuid) IS NULL OR jobs.tenant_id = :tenant) "
                "GROUP BY e.key ORDER BY e.key"
            ),
            {"since": since, "tenant": tenant_id},
        )
    }
    return CacheOutcomes(
        hits=int(hits),
        misses=int(misses),
        k_histogram=dict(sorted(histogram.items())),
        steps_requested=int(steps or 0),
        steps_skipped=int(skipped or 0),
        denoiser_evaluations=evals,
        hit_quality=None if hit_quality is None else float(hit_quality),
        miss_quality=None if miss_quality is None else float(miss_quality),
        judged=int(judged),
    )


def job_by_id(session: Session, job_id: uuid.UUID) -> Job | None:
    """Any tenant's job, for the workers (the API reads through get_job, scoped to the caller)."""
    return session.get(Job, job_id)


def tenant_opted_in_to_sharing(session: Session, tenant_id: uuid.UUID) -> bool:
    """Whether the tenant opted in to the shared cache scope (core.scopes.uses_shared_scope's first half)."""
    tenant = session.get(Tenant, tenant_id)
    return bool(tenant is not None and tenant.shared_cache)
