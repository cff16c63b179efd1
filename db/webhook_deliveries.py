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

from sqlalchemy import ColumnElement, Select, and_, exists, or_, select
from sqlalchemy.orm import Session, aliased

from db.models import Job, WebhookDelivery


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
_delivered = and_(_row.status_code >= 200, _row.status_code < 300)
_CONDITIONS: dict[DeliveryStatus, ColumnElement[bool]] = {
    DeliveryStatus.DELIVERED: _delivered,
    DeliveryStatus.PENDING: and_(_row.next_attempt_at.is_not(None), ~_delivered),
    DeliveryStatus.FAILED: and_(_row.next_attempt_at.is_(None), or_(_row.status_code.is_(None), ~_delivered)),
}


def _latest(tenant_id: uuid.UUID) -> Select[WebhookDelivery]:
    """The latest attempt of each of the tenant's messages."""
    is_latest = ~exists().where(_later.message_id == _row.message_id, _later.attempt > _row.attempt)
    return select(_row).join(Job, Job.id == _row.job_id).where(Job.tenant_id == tenant_id, is_latest)


def _view(row: WebhookDelivery) -> DeliveryView:
    code = row.status_code
    if code is not None and 200 <= code < 300:
        status = DeliveryStatus.DELIVERED
    elif row.next_attempt_at is not None:
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
) -> DeliveryPage:
    """The tenant's deliveries, newest latest attempt first, `limit` a page; `before`: the previous
    page's next_cursor."""
    query = _latest(tenant_id)
    if status is not None:
        query = query.where(_CONDITIONS[status])
    if job_id is not None:
        query = query.where(_row.job_id == job_id)
    if before is not None:
        query = query.where(_row.id < before)
    rows = list(session.scalars(query.order_by(_row.id.desc()).limit(limit + 1)))
    views = [_view(row) for row in rows[:limit]]
    return DeliveryPage(views, views[-1].cursor if len(rows) > limit else None)


def delivery_of(session: Session, *, tenant_id: uuid.UUID, message_id: str) -> DeliveryView | None:
    """One of the tenant's deliveries by its id (the message's webhook-id); None when not the tenant's."""
    row = session.scalar(_latest(tenant_id).where(_row.message_id == message_id))
    return None if row is None else _view(row)


def failed_between(
    session: Session, *, tenant_id: uuid.UUID, since: datetime, until: datetime, limit: int
) -> list[DeliveryView]:
    """The tenant's failed deliveries whose latest attempt was made in [since, until), oldest first."""
    query = _latest(tenant_id).where(
        _CONDITIONS[DeliveryStatus.FAILED], _row.created_at >= since, _row.created_at < until
    )
    return [_view(row) for row in session.scalars(query.order_by(_row.id).limit(limit))]
