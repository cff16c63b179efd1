"""Webhook delivery records (webhook_deliveries): every attempt of every event, and the reads the
delivery worker and the reconciler make of them. Functions take the caller's session."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, exists, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, aliased

from core.vocabulary import TERMINAL_STATUSES
from db.keys import signing_secrets as current_signing_secrets
from db.models import Job, Tenant, WebhookDelivery


@dataclass(frozen=True, slots=True)
class Waiting:
    """A message whose latest attempt failed and whose next attempt is scheduled."""

    job_id: uuid.UUID
    event: str
    attempt: int  # the latest attempt made; the next is attempt + 1
    next_attempt_at: datetime
    url: str


def job_of(session: Session, job_id: uuid.UUID) -> Job | None:
    """The job whose event is delivered (None once deleted)."""
    return session.get(Job, job_id)


def signing_secrets(session: Session, tenant_id: uuid.UUID) -> list[str]:
    """The secrets the tenant's deliveries are signed with now: the current one, and during a rotation's
    overlap the previous one too (db.keys.rotate_webhook_secret). A job's tenant is a foreign key."""
    return current_signing_secrets(session.get_one(Tenant, tenant_id))


def attempts_of(session: Session, message_id: str) -> list[tuple[int, int | None]]:
    """(attempt, status code) of every recorded attempt of one event (one webhook-id)."""
    rows = session.execute(
        select(WebhookDelivery.attempt, WebhookDelivery.status_code).where(
            WebhookDelivery.message_id == message_id
        )
    ).all()
    return [(attempt, code) for attempt, code in rows]


def url_gone(session: Session, *, tenant_id: uuid.UUID, url: str) -> bool:
    """Whether this URL answered 410 Gone to any delivery of the tenant."""
    return (
        session.scalar(
            select(WebhookDelivery.id)
            .join(Job, Job.id == WebhookDelivery.job_id)
            .where(Job.tenant_id == tenant_id, WebhookDelivery.url == url, WebhookDelivery.status_code == 410)
            .limit(1)
        )
        is not None
    )


INTERRUPTED = "interrupted: the worker stopped before the receiver's answer was recorded"
"""The error a claimed attempt carries until its outcome is recorded: what a killed attempt keeps."""


def claim_attempt(
    session: Session,
    *,
    job_id: uuid.UUID,
    message_id: str,
    event: str,
    url: str,
    attempt: int,
    next_attempt_at: datetime | None,
) -> int | None:
    """Record attempt `attempt` of a message before its request is sent; its id, or None when the
    attempt was claimed already (by another consumer, or a redelivered task): then it must not be sent.
    The unique index on (message_id, attempt) decides, so two consumers cannot both send one attempt.

    Until finish_attempt the row reads as failed with INTERRUPTED and `next_attempt_at` (the retry that
    follows should this attempt never finish): a worker killed mid-attempt leaves an attempt counted and
    its successor scheduled, never the same attempt to send again."""
    claimed = session.execute(
        pg_insert(WebhookDelivery)
        .values(
            job_id=job_id,
            message_id=message_id,
            event=event,
            url=url,
            attempt=attempt,
            error=INTERRUPTED,
            next_attempt_at=next_attempt_at,
        )
        .on_conflict_do_nothing(index_elements=["message_id", "attempt"])
        .returning(WebhookDelivery.id)
    ).scalar_one_or_none()
    return claimed


def finish_attempt(
    session: Session,
    *,
    delivery_id: int,
    status_code: int | None,
    error: str | None,
    next_attempt_at: datetime | None,
) -> None:
    """Record a claimed attempt's outcome; next_attempt_at None: no further attempt."""
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id)
        .values(status_code=status_code, error=error, next_attempt_at=next_attempt_at)
    )


def release_attempt(session: Session, *, delivery_id: int) -> None:
    """Forget a claimed attempt that must leave no trace (a failed probe keeps the schedule as it was)."""
    session.execute(delete(WebhookDelivery).where(WebhookDelivery.id == delivery_id))


def due_retries(
    session: Session, *, now: datetime, long_wait_s: float, overdue_s: float
) -> list[tuple[uuid.UUID, str, int]]:
    """(job, event, attempt) of each event whose latest attempt failed and whose next attempt is due
    and was not queued with a countdown (a wait over `long_wait_s`) or was lost (overdue by
    `overdue_s`)."""
    row, later = WebhookDelivery, aliased(WebhookDelivery)
    is_latest = ~exists().where(later.message_id == row.message_id, later.attempt > row.attempt)
    long_wait = row.next_attempt_at - row.created_at > timedelta(seconds=long_wait_s)
    lost = row.next_attempt_at <= now - timedelta(seconds=overdue_s)
    rows = session.execute(
        select(row.job_id, row.event, row.attempt).where(
            row.next_attempt_at.is_not(None),
            row.next_attempt_at <= now,
            or_(long_wait, lost),
            is_latest,
        )
    ).all()
    return [(job_id, event, attempt) for job_id, event, attempt in rows]


def never_attempted(
    session: Session,
    *,
    event: str,
    filter_name: str,
    happened: Literal["started", "finished"],
    cutoff: datetime,
    since: datetime,
) -> list[uuid.UUID]:
    """Jobs created since `since` that asked for `event` (`filter_name` in their filter), whose event
    happened before `cutoff` (started, or reached a terminal status) and has no attempt at all (the
    enqueue after the state change was lost), leaving out URLs that answered 410 Gone."""
    gone = aliased(WebhookDelivery)
    other = aliased(Job)
    url_is_gone = (
        select(gone.id)
        .join(other, other.id == gone.job_id)
        .where(other.tenant_id == Job.tenant_id, gone.url == Job.webhook_url, gone.status_code == 410)
        .exists()
    )
    if happened == "started":
        happened_at, condition = Job.started_at, Job.started_at.is_not(None)
    else:
        happened_at, condition = Job.finished_at, Job.status.in_([s.value for s in TERMINAL_STATUSES])
    attempted = (
        select(WebhookDelivery.id)
        .where(WebhookDelivery.job_id == Job.id, WebhookDelivery.event == event)
        .exists()
    )
    return list(
        session.scalars(
            select(Job.id).where(
                Job.created_at >= since,  # indexed: bounds the scan
                Job.webhook_url.is_not(None),
                Job.webhook_events_filter.contains([filter_name]),
                condition,
                happened_at <= cutoff,
                ~attempted,
                ~url_is_gone,
            )
        )
    )


def waiting_at(session: Session, *, url_prefix: str, after: datetime) -> list[Waiting]:
    """Messages to URLs starting with `url_prefix` whose latest attempt failed and whose next attempt
    is scheduled after `after` (jobs.policies.webhook_recovery decides which of them to send now). An
    attempt still in flight (claimed, no outcome yet: INTERRUPTED) is not waiting: its own outcome
    decides; one whose worker died is sent by the reconciler when its next attempt falls due."""
    row, later = WebhookDelivery, aliased(WebhookDelivery)
    is_latest = ~exists().where(later.message_id == row.message_id, later.attempt > row.attempt)
    same_start = or_(row.url == url_prefix, row.url.startswith(url_prefix + "/", autoescape=True))
    rows = session.execute(
        select(row.job_id, row.event, row.attempt, row.next_attempt_at, row.url).where(
            row.next_attempt_at > after,
            row.error.is_distinct_from(INTERRUPTED),
            or_(same_start, row.url.startswith(url_prefix + "?", autoescape=True)),
            is_latest,
        )
    ).all()
    return [
        Waiting(job_id=job_id, event=event, attempt=attempt, next_attempt_at=due, url=url)
        for job_id, event, attempt, due, url in rows
        if due is not None  # the query's condition; the column is nullable
    ]
