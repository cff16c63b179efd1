"""Delivering a job's webhook events: one signed POST per attempt, each attempt recorded in
webhook_deliveries, failures retried on REPRISE_WEBHOOK_RETRY_DELAYS_S, a 410 Gone ending all
deliveries of the tenant to that URL.

The task body (reprise.deliver_webhook, args [job_id, event, attempt]) is one call to run_delivery.
A delivery is at-least-once: receivers deduplicate on webhook-id, which is the same for every attempt
of one event.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session, aliased

from core.settings import Settings
from core.vocabulary import TERMINAL_STATUSES
from db.engine import session_scope
from db.models import Job, Tenant, WebhookDelivery
from jobs.dispatch import Dispatcher
from jobs.representation import generation_json
from jobs.webhooks import (
    FILTER_OF_EVENT,
    Resolver,
    UnresolvedWebhookHost,
    UnsafeWebhookUrl,
    WebhookEvent,
    WebhookTarget,
    check_webhook_url,
    delay_before,
    encode_payload,
    event_payload,
    is_delivered,
    is_gone,
    message_id,
    signature_headers,
    system_resolver,
    wants_event,
)

log = logging.getLogger(__name__)

USER_AGENT = "Reprise-Webhooks/0.1"


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    attempt: int
    status_code: int | None = None
    error: str | None = None
    delivered: bool = False
    retry_in: float | None = None  # seconds until the next attempt; None: no further attempt
    skipped: str | None = None  # why no request was sent (nothing recorded then)


@dataclass(frozen=True, slots=True)
class _Message:
    url: str
    secret: str
    body: bytes
    msg_id: str


def _already_settled(session: Session, msg_id: str, attempt: int) -> str | None:
    """Why this attempt must not be made: a redelivered task, or an event already delivered."""
    rows = session.execute(
        select(WebhookDelivery.attempt, WebhookDelivery.status_code).where(
            WebhookDelivery.message_id == msg_id
        )
    ).all()
    if any(code is not None and is_delivered(code) for _, code in rows):
        return "already delivered"
    if any(done >= attempt for done, _ in rows):
        return f"attempt {attempt} was already made"
    return None


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


def _prepare(settings: Settings, job_id: uuid.UUID, event: WebhookEvent, attempt: int) -> _Message | str:
    """The signed message to send, or why nothing is to be sent."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None:
            return "job is gone"
        if not job.webhook_url or not wants_event(job.webhook_events_filter, event):
            return "the job did not ask for this event"
        msg_id = message_id(job.id, event)
        if reason := _already_settled(session, msg_id, attempt):
            return reason
        if url_gone(session, tenant_id=job.tenant_id, url=job.webhook_url):
            return "the URL answered 410 Gone earlier"
        tenant = session.get(Tenant, job.tenant_id)
        assert tenant is not None  # a job's tenant is a foreign key
        happened = (job.started_at if event is WebhookEvent.STARTED else job.finished_at) or datetime.now(UTC)
        data = generation_json(job, base_url=settings.public_base_url or "")
        body = encode_payload(event_payload(event, data, at=happened))
        return _Message(url=job.webhook_url, secret=tenant.webhook_secret, body=body, msg_id=msg_id)


def _post(
    client: httpx.Client, target: WebhookTarget, headers: dict[str, str], body: bytes
) -> httpx.Response:
    """POST to the checked addresses themselves, so that a second DNS answer cannot redirect us to an
    internal host (rebinding). TLS still verifies the certificate against the URL's host name."""
    url = httpx.URL(target.url)
    pinned_headers = {**headers, "host": url.netloc.decode("ascii")}
    extensions = {"sni_hostname": target.host} if url.scheme == "https" else {}
    last_error: httpx.ConnectError | None = None
    for address in target.addresses:
        try:
            return client.post(
                url.copy_with(host=address), content=body, headers=pinned_headers, extensions=extensions
            )
        except httpx.ConnectError as error:  # try the host's next address
            last_error = error
    assert last_error is not None
    raise last_error


def deliver_webhook(
    *,
    settings: Settings,
    job_id: uuid.UUID,
    event: WebhookEvent,
    attempt: int = 1,
    client: httpx.Client | None = None,
    resolver: Resolver = system_resolver,
) -> DeliveryOutcome:
    """Make delivery attempt `attempt` of a job's event and record it. Never raises for the
    receiver's failures: they are recorded, and `retry_in` says when to try again."""
    # 1. Build the message, or learn there is nothing to send.
    prepared = _prepare(settings, job_id, event, attempt)
    if isinstance(prepared, str):
        log.info("webhook %s of job %s, attempt %d: skipped, %s", event, job_id, attempt, prepared)
        return DeliveryOutcome(attempt=attempt, skipped=prepared)
    # 2. Check the URL again at send time: DNS may have changed since submission.
    status_code: int | None = None
    error: str | None = None
    target: WebhookTarget | None = None
    refused = False  # the URL reaches a host we must not call: no retry
    try:
        target = check_webhook_url(prepared.url, allow_hosts=settings.webhook_allow_hosts, resolve=resolver)
    except UnresolvedWebhookHost as unresolved:  # DNS may come back: retry on the schedule
        error = str(unresolved)
    except UnsafeWebhookUrl as unsafe:
        error, refused = f"refused: {unsafe}", True
    # 3. Sign with the send time (receivers check it against replays) and POST.
    if target is not None:
        now = int(datetime.now(UTC).timestamp())
        headers = signature_headers(
            prepared.secret, msg_id=prepared.msg_id, timestamp=now, body=prepared.body
        )
        headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
        own_client = client is None
        http = client or httpx.Client(
            timeout=settings.webhook_timeout_s, follow_redirects=False, trust_env=False
        )
        try:
            status_code = _post(http, target, headers, prepared.body).status_code
            error = None if is_delivered(status_code) else f"HTTP {status_code}"
        except httpx.HTTPError as failure:
            error = f"{type(failure).__name__}: {failure}"[:1000]
        finally:
            if own_client:
                http.close()
    # 4. Decide what comes next and record the attempt.
    delivered = status_code is not None and is_delivered(status_code)
    final = delivered or refused or (status_code is not None and is_gone(status_code))
    retry_in = None if final else delay_before(attempt + 1, settings.webhook_retry_delays_s)
    with session_scope(settings) as session:
        session.add(
            WebhookDelivery(
                job_id=job_id,
                message_id=prepared.msg_id,
                event=event.value,
                url=prepared.url,
                attempt=attempt,
                status_code=status_code,
                error=error,
                next_attempt_at=None if retry_in is None else datetime.now(UTC) + timedelta(seconds=retry_in),
            )
        )
    log.info("webhook %s of job %s, attempt %d: %s", event, job_id, attempt, error or status_code)
    return DeliveryOutcome(
        attempt=attempt, status_code=status_code, error=error, delivered=delivered, retry_in=retry_in
    )


def run_delivery(
    *,
    settings: Settings,
    job_id: uuid.UUID,
    event: WebhookEvent,
    attempt: int = 1,
    dispatcher: Dispatcher,
) -> DeliveryOutcome:
    """The body of the reprise.deliver_webhook task: one attempt, then queue the next when due soon.

    A retry further away than half the broker's visibility timeout is not queued with a countdown
    (Redis would redeliver such a held message); enqueue_due_retries, run by the reconciler, sends it.
    """
    outcome = deliver_webhook(settings=settings, job_id=job_id, event=event, attempt=attempt)
    if outcome.retry_in is not None and _queued_with_countdown(settings, outcome.retry_in):
        dispatcher.deliver_webhook(job_id, event, attempt=attempt + 1, countdown=outcome.retry_in)
    return outcome


def _queued_with_countdown(settings: Settings, retry_in: float) -> bool:
    # Redis redelivers a message held unacked past the visibility timeout: longer waits go through
    # enqueue_due_retries instead of a countdown.
    return retry_in <= settings.visibility_timeout_s / 2


BACKFILL_WINDOW = timedelta(days=1)  # how far back the reconciler looks for events never attempted


def _never_attempted(
    session: Session, settings: Settings, current: datetime
) -> list[tuple[uuid.UUID, WebhookEvent]]:
    """Events of recent jobs that should have been sent stuck_after_s ago and have no attempt at all
    (the enqueue after the state change was lost), leaving out URLs that answered 410 Gone."""
    cutoff = current - timedelta(seconds=settings.stuck_after_s)
    gone = aliased(WebhookDelivery)
    other = aliased(Job)
    url_is_gone = (
        select(gone.id)
        .join(other, other.id == gone.job_id)
        .where(other.tenant_id == Job.tenant_id, gone.url == Job.webhook_url, gone.status_code == 410)
        .exists()
    )
    found: list[tuple[uuid.UUID, WebhookEvent]] = []
    for event, happened_at, condition in (
        (WebhookEvent.STARTED, Job.started_at, Job.started_at.is_not(None)),
        (WebhookEvent.COMPLETED, Job.finished_at, Job.status.in_([s.value for s in TERMINAL_STATUSES])),
    ):
        attempted = (
            select(WebhookDelivery.id)
            .where(WebhookDelivery.job_id == Job.id, WebhookDelivery.event == event.value)
            .exists()
        )
        ids = session.scalars(
            select(Job.id).where(
                Job.created_at >= current - BACKFILL_WINDOW,  # indexed: bounds the scan
                Job.webhook_url.is_not(None),
                Job.webhook_events_filter.contains([FILTER_OF_EVENT[event].value]),
                condition,
                happened_at <= cutoff,
                ~attempted,
                ~url_is_gone,
            )
        )
        found += [(job_id, event) for job_id in ids]
    return found


def enqueue_due_retries(*, settings: Settings, dispatcher: Dispatcher, now: datetime | None = None) -> int:
    """For the reconciler: queue every delivery attempt that is due and that no queued task will make.

    That is the next attempt of each event whose latest attempt failed: the long waits run_delivery
    left to us, and short retries whose queued task was lost (overdue by stuck_after_s); and the first
    attempt of recent events that were never attempted. Returns how many were queued. A duplicate is
    harmless: deliver_webhook skips an attempt that was already made.
    """
    current = now or datetime.now(UTC)
    row, later = WebhookDelivery, aliased(WebhookDelivery)
    is_latest = ~exists().where(later.message_id == row.message_id, later.attempt > row.attempt)
    long_wait = row.next_attempt_at - row.created_at > timedelta(seconds=settings.visibility_timeout_s / 2)
    lost = row.next_attempt_at <= current - timedelta(seconds=settings.stuck_after_s)
    with session_scope(settings) as session:
        retries = session.execute(
            select(row.job_id, row.event, row.attempt).where(
                row.next_attempt_at.is_not(None),
                row.next_attempt_at <= current,
                or_(long_wait, lost),
                is_latest,
            )
        ).all()
        first = _never_attempted(session, settings, current)
    for job_id, event, attempt in retries:
        dispatcher.deliver_webhook(job_id, WebhookEvent(event), attempt=attempt + 1)
    for job_id, first_event in first:
        dispatcher.deliver_webhook(job_id, first_event, attempt=1)
    return len(retries) + len(first)
