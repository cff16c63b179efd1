"""A tenant's webhook deliveries as the API shows them: one per message (one event of one job, its
webhook-id), read from its latest attempt in webhook_deliveries, and the dead letter among them.

A delivery is `delivered` once an attempt was answered 2xx; `pending` while a next attempt is
scheduled (or its latest attempt is in flight); `failed` when its attempts are spent, the receiver
answered 410 Gone, or the URL was refused: a dead letter, kept until the job is deleted, that the tenant
can redeliver (one more attempt, api.routes.webhook_deliveries). Functions take the caller's session.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from db.models import Job, WebhookDelivery
from db.webhooks import INTERRUPTED


class DeliveryStatus(StrEnum):
    DELIVERED = "delivered"
    PENDING = "pending"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A message's delivery, as of its latest attempt."""

    message_id: str
    job_id: uuid.UUID
    event: str
    url: str
    status: DeliveryStatus
    attempts: int  # attempts made (numbered 1..n; a failed probe leaves none)
    last_status_code: int | None
    last_error: str | None
    last_attempt_at: datetime
    next_attempt_at: datetime | None
    cursor: int  # the latest attempt's row id: pages run newest first


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    deliveries: list[DeliveryView]
    next_cursor: int | None


_row = WebhookDelivery
_later = aliased(WebhookDelivery)
_code = func.coalesce(_row.status_code, 0)  # no answer: not delivered (NULL would drop the row)
_delivered = and_(_code >= 200, _code < 300)


def _in_flight(since: datetime) -> ColumnElement[bool]:
    """Claimed since `since` and no outcome yet: an attempt still running (the last one of a schedule
    has no next attempt, and must not read as failed meanwhile)."""
    return and_(func.coalesce(_row.error, "") == INTERRUPTED, _row.created_at > since)


def _condition(status: DeliveryStatus, in_flight_since: datetime) -> ColumnElement[bool]:
    in_flight = _in_flight(in_flight_since)
    if status is DeliveryStatus.DELIVERED:
        return _delivered
    if status is DeliveryStatus.PENDING:
        return and_(~_delivered, or_(_row.next_attempt_at.is_not(None), in_flight))
    return and_(~_delivered, _row.next_attempt_at.is_(None), ~in_flight)


def _latest(tenant_id: uuid.UUID) -> Select[WebhookDelivery]:
    """The latest attempt of each of the tenant's messages."""
    is_latest = ~exists().where(_later.message_id == _row.message_id, _later.attempt > _row.attempt)
    return select(_row).join(Job, Job.id == _row.job_id).where(Job.tenant_id == tenant_id, is_latest)


def _view(row: WebhookDelivery, in_flight_since: datetime) -> DeliveryView:
    code = row.status_code
    in_flight = row.error == INTERRUPTED and row.created_at > in_flight_since
    if code is not None and 200 <= code < 300:
        status = DeliveryStatus.DELIVERED
    elif row.next_attempt_at is not None or in_flight:
        status = DeliveryStatus.PENDING
    else:
        status = DeliveryStatus.FAILED
    return DeliveryView(
        message_id=row.message_id,
        job_id=row.job_id,
        event=row.event,
        url=row.url,
        status=status,
        attempts=row.attempt,
        last_status_code=code,
        last_error=row.error,
        last_attempt_at=row.created_at,
        next_attempt_at=row.next_attempt_at,
        cursor=row.id,
    )


def list_deliveries(
    session: Session,
    *,
    tenant_id: uuid.UUID,
    status: DeliveryStatus | None = None,
    job_id: uuid.UUID | None = None,
    limit: int,
    before: int | None = None,
    in_flight_since: datetime,
) -> DeliveryPage:
    """The tenant's deliveries, newest latest attempt first, `limit` a page; `before`: the previous
    page's next_cursor. An attempt claimed after `in_flight_since` without an outcome is in flight."""
    query = _latest(tenant_id)
    if status is not None:
        query = query.where(_condition(status, in_flight_since))
    if job_id is not None:
        query = query.where(_row.job_id == job_id)
    if before is not None:
        query = query.where(_row.id < before)
    rows = list(session.scalars(query.order_by(_row.id.desc()).limit(limit + 1)))
    views = [_view(row, in_flight_since) for row in rows[:limit]]
    return DeliveryPage(views, views[-1].cursor if len(rows) > limit else None)


def delivery_of(
    session: Session, *, tenant_id: uuid.UUID, message_id: str, in_flight_since: datetime
) -> DeliveryView | None:
    """One of the tenant's deliveries by its id (the message's webhook-id); None when not the tenant's."""
    row = session.scalar(_latest(tenant_id).where(_row.message_id == message_id))
    return None if row is None else _view(row, in_flight_since)


def failed_between(
    session: Session,
    *,
    tenant_id: uuid.UUID,
    since: datetime,
    until: datetime,
    limit: int,
    in_flight_since: datetime,
) -> list[DeliveryView]:
    """The tenant's failed deliveries whose latest attempt was made in [since, until), oldest first."""
    failed = _condition(DeliveryStatus.FAILED, in_flight_since)
    query = _latest(tenant_id).where(failed, _row.created_at >= since, _row.created_at < until)
    return [_view(row, in_flight_since) for row in session.scalars(query.order_by(_row.id).limit(limit))]
