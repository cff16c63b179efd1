"""/v1/webhook-deliveries: a tenant's webhook deliveries (one per event of a job, its id the
webhook-id receivers see), the dead letter among them, and their redelivery, as Svix's message
attempts and Stripe's event resend: a failed delivery is kept, listed with its attempts and last error,
and sent again, one more attempt, on the tenant's request."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.datastructures import URL

from api.deps import AppState, BaseUrlDep, SessionDep, StateDep, TenantDep
from api.metrics import ENQUEUE_FAILURES
from api.problems import Problem
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.vocabulary import WebhookEvent
from db import webhook_deliveries as deliveries_db
from db.models import Tenant
from db.webhook_deliveries import DeliveryStatus, DeliveryView
from db.webhooks import url_gone
from jobs.dispatch import Dispatcher

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/webhook-deliveries", tags=["webhooks"], route_class=ReleasingRoute)

RANGE_LIMIT = 1000  # deliveries one range redelivery queues at most: a page of a dashboard's worth


class WebhookDelivery(BaseModel):
    id: str = Field(description="The delivery's id: the webhook-id header its receiver saw.")
    generation_id: uuid.UUID
    event: str = Field(description="generation.started or generation.completed.")
    url: str
    status: DeliveryStatus = Field(
        description="delivered (answered 2xx), pending (a next attempt is scheduled or in flight), or "
        "failed: its attempts are spent, the URL answered 410 Gone or was refused (a dead letter)."
    )
    attempts: int = Field(description="Attempts made so far.")
    last_status_code: int | None = Field(description="The latest attempt's HTTP status; null: no answer.")
    last_error: str | None = Field(description="Why the latest attempt failed; null when it did not.")
    last_attempt_at: datetime
    next_attempt_at: datetime | None


class WebhookDeliveryList(BaseModel):
    results: list[WebhookDelivery]
    next: str | None = Field(description="URL of the next page (older deliveries); null on the last page.")


class Redelivery(BaseModel):
    ids: list[str] = Field(description="The deliveries queued for one more attempt.")
    more: bool = Field(description="Whether failed deliveries in the range were left for another call.")


def _delivery(view: DeliveryView) -> WebhookDelivery:
    return WebhookDelivery(
        id=view.message_id,
        generation_id=view.job_id,
        event=view.event,
        url=view.url,
        status=view.status,
        attempts=view.attempts,
        last_status_code=view.last_status_code,
        last_error=view.last_error,
        last_attempt_at=view.last_attempt_at,
        next_attempt_at=view.next_attempt_at,
    )


def _cursor(text: str) -> int:
    if not text.isdigit() or len(text) > 19:
        raise Problem(422, "cursor is not one this API returned", slug="invalid-input")
    return int(text)


@router.get("", responses=problem_responses(401, 422))
def list_webhook_deliveries(
    tenant: TenantDep,
    session: SessionDep,
    state: StateDep,
    base: BaseUrlDep,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    generation: Annotated[uuid.UUID | None, Query(description="Only this generation's deliveries.")] = None,
    limit: Annotated[int, Query(ge=1, le=100, description="Deliveries per page.")] = 20,
    cursor: Annotated[
        str | None, Query(max_length=40, description="The `next` of the previous page.")
    ] = None,
) -> WebhookDeliveryList:
    """List your webhook deliveries, the latest attempt first, a page at a time (follow `next`);
    `status=failed` lists the dead letter."""
    page = deliveries_db.list_deliveries(
        session,
        tenant_id=tenant.id,
        status=status,
        job_id=generation,
        limit=limit,
        before=_cursor(cursor) if cursor is not None else None,
        in_flight_since=_in_flight_since(state),
    )
    next_url = None
    if page.next_cursor is not None:
        query = {"limit": str(limit), "cursor": str(page.next_cursor)}
        if status is not None:
            query["status"] = status.value
        if generation is not None:
            query["generation"] = str(generation)
        next_url = str(URL(f"{base}{router.prefix}").include_query_params(**query))
    return WebhookDeliveryList(results=[_delivery(view) for view in page.deliveries], next=next_url)


@router.get("/{delivery_id}", responses=problem_responses(401, 404))
def get_webhook_delivery(
    delivery_id: str, tenant: TenantDep, session: SessionDep, state: StateDep
) -> WebhookDelivery:
    """One of your webhook deliveries."""
    return _delivery(_load(session, tenant, delivery_id, state))


@router.post("/{delivery_id}/redeliver", status_code=202, responses=problem_responses(401, 404, 409, 503))
def redeliver_webhook_delivery(
    delivery_id: str, tenant: TenantDep, session: SessionDep, state: StateDep
) -> Redelivery:
    """Send a failed delivery again: one more attempt, signed afresh, with the same webhook-id (a
    receiver that saw it already deduplicates). 409 unless the delivery failed."""
    view = _load(session, tenant, delivery_id, state)
    if view.status is not DeliveryStatus.FAILED:
        raise Problem(
            409,
            f"delivery {delivery_id} is {view.status.value}: only a failed one is redelivered",
            slug="conflict",
        )
    if url_gone(session, tenant_id=tenant.id, url=view.url):
        raise Problem(409, f"{view.url} answered 410 Gone: nothing is sent to it again", slug="conflict")
    _queue(state.dispatcher, view)
    return Redelivery(ids=[view.message_id], more=False)


@router.post("/redeliver", status_code=202, responses=problem_responses(401, 422, 503))
def redeliver_webhook_deliveries(
    tenant: TenantDep,
    session: SessionDep,
    state: StateDep,
    since: Annotated[
        datetime, Query(description="Failed deliveries whose latest attempt was at or after this.")
    ],
    until: Annotated[datetime | None, Query(description="... and before this (default: now).")] = None,
) -> Redelivery:
    """Send every failed delivery of a time range again (at most 1000 a call; `more` says whether
    others remain: call again with `since` past the last one's attempt). URLs that answered 410 Gone
    are left out."""
    end = until or datetime.now(UTC)
    if since.tzinfo is None or end.tzinfo is None:
        raise Problem(
            422, "since and until need a time zone (e.g. 2026-12-02T05:00:00Z)", slug="invalid-input"
        )
    if end <= since:
        raise Problem(422, "until must be after since", slug="invalid-input")
    failed = deliveries_db.failed_between(
        session,
        tenant_id=tenant.id,
        since=since,
        until=end,
        limit=RANGE_LIMIT + 1,
        in_flight_since=_in_flight_since(state),
    )
    chosen = [
        view for view in failed[:RANGE_LIMIT] if not url_gone(session, tenant_id=tenant.id, url=view.url)
    ]
    for view in chosen:
        _queue(state.dispatcher, view)
    return Redelivery(ids=[view.message_id for view in chosen], more=len(failed) > RANGE_LIMIT)


IN_FLIGHT_MARGIN_S = 30.0  # past the attempt's deadline: recording its outcome, a slow commit


def _in_flight_since(state: AppState) -> datetime:
    """Attempts claimed after this without an outcome are still running; older ones were cut short."""
    window = state.settings.webhook_attempt_deadline_s + IN_FLIGHT_MARGIN_S
    return datetime.now(UTC) - timedelta(seconds=window)


def _load(session: SessionDep, tenant: Tenant, delivery_id: str, state: AppState) -> DeliveryView:
    view = deliveries_db.delivery_of(
        session, tenant_id=tenant.id, message_id=delivery_id, in_flight_since=_in_flight_since(state)
    )
    if view is None:
        raise Problem(404, f"no webhook delivery {delivery_id}", slug="not-found")
    return view


def _queue(dispatcher: Dispatcher, view: DeliveryView) -> None:
    """Queue the delivery's next attempt (attempts + 1; past the retry schedule it is the only one)."""
    try:
        dispatcher.deliver_webhook(view.job_id, WebhookEvent(view.event), attempt=view.attempts + 1)
    except Exception:
        ENQUEUE_FAILURES.labels("webhook").inc()
        log.warning("could not queue the redelivery of %s", view.message_id, exc_info=True)
        raise Problem(503, "the queue is unreachable: try again shortly", slug="unavailable") from None
    log.info("webhook delivery %s redelivered, attempt %d", view.message_id, view.attempts + 1)
