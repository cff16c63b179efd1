"""Delivering a job's webhook events: one signed POST per attempt, each attempt recorded in
webhook_deliveries, failures retried on REPRISE_WEBHOOK_RETRY_DELAYS_S, a 410 Gone ending all
deliveries of the tenant to that URL, and once an endpoint that failed answers 2xx again, the
deliveries waiting for it sent at once (`follow_endpoint`).

The task body (reprise.deliver_webhook, args [job_id, event, attempt]) is one call to run_delivery.
A delivery is at-least-once: receivers deduplicate on webhook-id, which is the same for every attempt
of one event. A succeeded job's event carries `signed_output` beside `data` (jobs.output_links): a link
to its image or video that needs no API key, valid for REPRISE_OUTPUT_LINK_TTL_S from the attempt that
sends it.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import redis
from sqlalchemy.exc import OperationalError

from core.server_keys import output_link_key
from core.settings import Settings
from core.vocabulary import JobStatus, WebhookEvent
from db import webhooks as webhooks_db
from db.engine import session_scope
from db.models import Job
from jobs.dispatch import Dispatcher
from jobs.output_links import signed_output
from jobs.policies.webhook_recovery import (
    BATCH,
    PROBING,
    endpoint_of,
    failing_key,
    mark_ttl_s,
    to_send_now,
    url_prefix,
)
from jobs.representation import generation_json
from jobs.webhooks import (
    Resolver,
    UnresolvedWebhookHost,
    UnsafeWebhookUrl,
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
from workers.endpoint_pause import EndpointPause, paused_error
from workers.endpoint_slots import EndpointSlots
from workers.metrics import WEBHOOK_DEAD_LETTERS, WEBHOOK_DEFERRALS
from workers.webhook_http import AttemptLimits, post_within

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
    busy: bool = False  # skipped because the endpoint's slots were all taken: to queue again shortly
    url: str | None = None  # where the request went


@dataclass(frozen=True, slots=True)
class _Message:
    url: str
    secrets: list[str]  # the current secret first; the previous one too during a rotation's overlap
    body: bytes
    msg_id: str


def _prepare(settings: Settings, job_id: uuid.UUID, event: WebhookEvent, attempt: int) -> _Message | str:
    """The signed message to send, or why nothing is to be sent."""
    with session_scope(settings) as session:
        job = webhooks_db.job_of(session, job_id)
        if job is None:
            return "job is gone"
        if not job.webhook_url or not wants_event(job.webhook_events_filter, event):
            return "the job did not ask for this event"
        msg_id = message_id(job.id, event)
        if reason := _already_settled(webhooks_db.attempts_of(session, msg_id), attempt):
            return reason
        if webhooks_db.url_gone(session, tenant_id=job.tenant_id, url=job.webhook_url):
            return "the URL answered 410 Gone earlier"
        secrets = webhooks_db.signing_secrets(session, job.tenant_id)
        happened = (job.started_at if event is WebhookEvent.STARTED else job.finished_at) or datetime.now(UTC)
        body = encode_payload(_event(settings, job, event, secrets, happened))
        return _Message(url=job.webhook_url, secrets=secrets, body=body, msg_id=msg_id)


def _event(
    settings: Settings, job: Job, event: WebhookEvent, secrets: list[str], happened: datetime
) -> dict[str, Any]:
    """{type, timestamp, data: the job object of GET}; a succeeded job's event also holds
    `signed_output`, a link to its output that needs no API key."""
    base_url = settings.public_base_url or ""
    payload = event_payload(event, generation_json(job, base_url=base_url), at=happened)
    if event is WebhookEvent.COMPLETED and job.status == JobStatus.SUCCEEDED and secrets:
        payload["signed_output"] = signed_output(
            job_id=job.id,
            key=output_link_key(settings),
            base_url=base_url,
            ttl_s=settings.output_link_ttl_s,
            now=datetime.now(UTC),
        )
    return payload


def attempt_limits(settings: Settings) -> AttemptLimits:
    return AttemptLimits(
        deadline_s=settings.webhook_attempt_deadline_s,
        max_response_bytes=settings.webhook_response_max_bytes,
        step_timeout_s=min(settings.webhook_timeout_s, settings.webhook_attempt_deadline_s),
    )


def _check(settings: Settings, url: str, resolver: Resolver) -> WebhookTarget | str:
    """The URL checked again at send time (DNS may have changed since submission): its target, or why
    it may never be called (then no retry)."""
    try:
        return check_webhook_url(url, allow_hosts=settings.webhook_allow_hosts, resolve=resolver)
    except UnresolvedWebhookHost:  # DNS may come back: the send fails and retries on the schedule
        raise
    except UnsafeWebhookUrl as unsafe:
        return f"refused: {unsafe}"


def _send(
    settings: Settings, prepared: _Message, target: WebhookTarget, client: httpx.Client | None
) -> tuple[int | None, str | None, bool]:
    """One attempt: sign with the send time (receivers check it against replays) and POST within the
    attempt's deadline (workers.webhook_http). (status code or None, error or None, whether it ended
    without an answer in time: the deadline, or a connect or read timeout)."""
    now = int(datetime.now(UTC).timestamp())
    headers = signature_headers(prepared.secrets, msg_id=prepared.msg_id, timestamp=now, body=prepared.body)
    headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
    limits = attempt_limits(settings)
    http = client or httpx.Client(timeout=limits.step_timeout_s, follow_redirects=False, trust_env=False)
    try:
        status_code = post_within(http, target, headers, prepared.body, limits)
        return status_code, None if is_delivered(status_code) else f"HTTP {status_code}", False
    except httpx.HTTPError as failure:
        timed_out = isinstance(failure, httpx.TimeoutException)
        return None, f"{type(failure).__name__}: {failure}"[:1000], timed_out
    finally:
        if client is None:
            http.close()


def deliver_webhook(
    *,
    settings: Settings,
    job_id: uuid.UUID,
    event: WebhookEvent,
    attempt: int = 1,
    client: httpx.Client | None = None,
    resolver: Resolver = system_resolver,
    probe: bool = False,
    slots: EndpointSlots | None = None,
    pause: EndpointPause | None = None,
) -> DeliveryOutcome:
    """Make delivery attempt `attempt` of a job's event, recorded before it is sent. Never raises for
    the receiver's failures: they are recorded, and `retry_in` says when to try again. A probe (the
    reconciler's try of an endpoint that failed, jobs.passes.webhook_probes) is kept only if delivered:
    failed, it leaves the message's schedule as it was. With `slots`, an endpoint whose slots are all
    taken gets nothing now: the outcome says `busy`, and the caller queues the attempt again. With
    `pause`, an endpoint whose recent attempts went unanswered gets no request but a probe
    (workers.endpoint_pause)."""
    # 1. Build the message, or learn there is nothing to send.
    prepared = _prepare(settings, job_id, event, attempt)
    if isinstance(prepared, str):
        log.info("webhook %s of job %s, attempt %d: skipped, %s", event, job_id, attempt, prepared)
        return DeliveryOutcome(attempt=attempt, skipped=prepared)
    how = (client, resolver, probe, pause)
    if slots is None:
        return _attempt(settings, prepared, job_id, event, attempt, how)
    with slots.hold(prepared.url) as taken:
        if not taken:
            return DeliveryOutcome(attempt=attempt, skipped=ENDPOINT_BUSY, busy=True, url=prepared.url)
        return _attempt(settings, prepared, job_id, event, attempt, how)


ENDPOINT_BUSY = "the endpoint's slots are all taken"


def _attempt(
    settings: Settings,
    prepared: _Message,
    job_id: uuid.UUID,
    event: WebhookEvent,
    attempt: int,
    how: tuple[httpx.Client | None, Resolver, bool, EndpointPause | None],
) -> DeliveryOutcome:
    client, resolver, probe, pause = how
    # 2. Claim the attempt: recorded before it is sent, once across every consumer.
    delivery_id = _claim(settings, prepared, job_id, event, attempt)
    if delivery_id is None:
        log.info("webhook %s of job %s, attempt %d: claimed already, not sent", event, job_id, attempt)
        return DeliveryOutcome(attempt=attempt, skipped=f"attempt {attempt} was already made")
    # 3. Check the URL again, sign and POST within the attempt's deadline.
    status_code, error, refused = None, None, False
    try:
        checked = _check(settings, prepared.url, resolver)
    except UnresolvedWebhookHost as unresolved:
        checked, error = None, str(unresolved)
    if isinstance(checked, str):
        error, refused = checked, True
    elif checked is not None and pause is not None and not probe and pause.paused(prepared.url):
        error = paused_error(prepared.url, settings.webhook_probe_s)  # no request: the probe tries it
    elif checked is not None:
        status_code, error, timed_out = _send(settings, prepared, checked, client)
        if pause is not None:
            pause.observe(prepared.url, answered=status_code is not None, timed_out=timed_out)
    # 4. Decide what comes next and record the outcome.
    delivered = status_code is not None and is_delivered(status_code)
    if probe and not delivered:
        _insist(lambda: _release(settings, delivery_id), what=f"forgetting probe {prepared.msg_id}")
        log.info("webhook %s of job %s, probe: %s", event, job_id, error or status_code)
        return DeliveryOutcome(attempt=attempt, status_code=status_code, error=error, url=prepared.url)
    final = delivered or refused or (status_code is not None and is_gone(status_code))
    retry_in = None if final else delay_before(attempt + 1, settings.webhook_retry_delays_s)
    next_at = None if retry_in is None else datetime.now(UTC) + timedelta(seconds=retry_in)

    def record() -> None:
        with session_scope(settings) as session:
            webhooks_db.finish_attempt(
                session,
                delivery_id=delivery_id,
                status_code=status_code,
                error=error,
                next_attempt_at=next_at,
            )

    _insist(record, what=f"recording webhook {prepared.msg_id} attempt {attempt}")
    if retry_in is None and not delivered:
        WEBHOOK_DEAD_LETTERS.labels(event=event.value).inc()
    log.info("webhook %s of job %s, attempt %d: %s", event, job_id, attempt, error or status_code)
    return DeliveryOutcome(
        attempt=attempt,
        status_code=status_code,
        error=error,
        delivered=delivered,
        retry_in=retry_in,
        url=prepared.url,
    )


def _claim(
    settings: Settings, prepared: _Message, job_id: uuid.UUID, event: WebhookEvent, attempt: int
) -> int | None:
    """Insert the attempt's row; None when another consumer (or an earlier run of this task) holds it.
    Its provisional next attempt follows the attempt's deadline, so a worker killed mid-attempt leaves
    the next one scheduled (the reconciler sends it)."""
    after = delay_before(attempt + 1, settings.webhook_retry_delays_s)
    pending = settings.webhook_attempt_deadline_s + (after or 0.0)
    next_at = None if after is None else datetime.now(UTC) + timedelta(seconds=pending)

    def claim() -> int | None:
        with session_scope(settings) as session:
            return webhooks_db.claim_attempt(
                session,
                job_id=job_id,
                message_id=prepared.msg_id,
                event=event.value,
                url=prepared.url,
                attempt=attempt,
                next_attempt_at=next_at,
            )

    return _insist(claim, what=f"claiming webhook {prepared.msg_id} attempt {attempt}")


def _release(settings: Settings, delivery_id: int) -> None:
    with session_scope(settings) as session:
        webhooks_db.release_attempt(session, delivery_id=delivery_id)


_T = TypeVar("_T")
RECORD_PATIENCE_S = 120.0  # a made POST survives a Postgres outage this long unrecorded


def _insist(write: Callable[[], _T], *, what: str, patience_s: float = RECORD_PATIENCE_S) -> _T:
    """Write, retrying while Postgres is unreachable. The POST was made: an unrecorded attempt would be
    made again (a duplicate delivery), so keep trying rather than give up at the first error."""
    deadline, pause = time.monotonic() + patience_s, 0.5
    while True:
        try:
            return write()
        except OperationalError:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("%s: database unreachable; retrying in %.1fs", what, pause)
            time.sleep(pause)
            pause = min(pause * 2, 8.0)


def run_delivery(
    *,
    settings: Settings,
    job_id: uuid.UUID,
    event: WebhookEvent,
    attempt: int = 1,
    dispatcher: Dispatcher,
    broker: redis.Redis,
    probe: bool = False,
) -> DeliveryOutcome:
    """The body of the reprise.deliver_webhook task: one attempt, then queue the next when due soon,
    and after a success at an endpoint that had failed, its waiting deliveries (`follow_endpoint`).

    An attempt whose endpoint has all its slots taken (REPRISE_WEBHOOK_ENDPOINT_CONCURRENCY) is queued
    again a few seconds later, the same attempt, instead of holding one of the pool's threads waiting.

    A retry further away than half the broker's visibility timeout is not queued with a countdown
    (Redis would redeliver such a held message); the reconcile pass (jobs.passes.reconcile) sends it.
    """
    slots = EndpointSlots(
        broker, capacity=settings.webhook_endpoint_concurrency, deadline_s=settings.webhook_attempt_deadline_s
    )
    pause = EndpointPause(
        broker,
        after=settings.webhook_pause_after_timeouts,
        ttl_s=mark_ttl_s(settings.webhook_retry_delays_s),
    )
    outcome = deliver_webhook(
        settings=settings, job_id=job_id, event=event, attempt=attempt, probe=probe, slots=slots, pause=pause
    )
    if outcome.busy:  # the same attempt, shortly: the endpoint's slots free as its attempts end
        WEBHOOK_DEFERRALS.inc()
        dispatcher.deliver_webhook(job_id, event, attempt=attempt, countdown=busy_countdown_s(), probe=probe)
        return outcome
    if outcome.retry_in is not None and _queued_with_countdown(settings, outcome.retry_in):
        dispatcher.deliver_webhook(job_id, event, attempt=attempt + 1, countdown=outcome.retry_in)
    follow_endpoint(settings=settings, outcome=outcome, dispatcher=dispatcher, broker=broker)
    return outcome


def follow_endpoint(
    *, settings: Settings, outcome: DeliveryOutcome, dispatcher: Dispatcher, broker: redis.Redis
) -> int:
    """The endpoint's health, kept in Redis: an attempt that failed and will be retried marks its
    endpoint; the first success after a mark takes it (GETDEL: one success, one sweep) and queues, now,
    the deliveries waiting for that endpoint (jobs.policies.webhook_recovery). Returns how many.

    Best effort: without Redis the waiting deliveries keep their schedule's slots."""
    if outcome.url is None:
        return 0
    key = failing_key(outcome.url)
    try:
        if outcome.retry_in is not None:
            broker.set(key, outcome.url, ex=mark_ttl_s(settings.webhook_retry_delays_s))
            broker.zadd(PROBING, {endpoint_of(outcome.url): time.time()}, nx=True)
            return 0
        if not outcome.delivered or broker.getdel(key) is None:
            return 0
        broker.zrem(PROBING, endpoint_of(outcome.url))
    except redis.RedisError as error:
        log.warning("webhook endpoint of %s: health mark not kept (%s)", outcome.url, error)
        return 0
    now = datetime.now(UTC)
    with session_scope(settings) as session:
        waiting = webhooks_db.waiting_at(session, url_prefix=url_prefix(outcome.url), after=now)
    chosen = to_send_now(waiting, endpoint=endpoint_of(outcome.url), now=now)
    for delivery in chosen:
        dispatcher.deliver_webhook(
            delivery.job_id, WebhookEvent(delivery.event), attempt=delivery.attempt + 1
        )
    if len(chosen) == BATCH:  # more wait: the endpoint's next success sends the next batch
        broker.set(key, outcome.url, ex=mark_ttl_s(settings.webhook_retry_delays_s))
    if chosen:
        log.info("webhook endpoint %s answers again: %d waiting deliveries sent now", key, len(chosen))
    return len(chosen)


BUSY_COUNTDOWN_S = (1.0, 3.0)
"""Seconds before a deferred attempt is tried again, drawn at random between these (spread so that
deferred attempts do not come back together): an attempt's deadline is 15 s, so a slot frees within
seconds when several are in flight."""


def busy_countdown_s() -> float:
    return random.uniform(*BUSY_COUNTDOWN_S)


def _queued_with_countdown(settings: Settings, retry_in: float) -> bool:
    # Redis redelivers a message held unacked past the visibility timeout: longer waits go through
    # the reconcile pass instead of a countdown.
    return retry_in <= settings.visibility_timeout_s / 2


def _already_settled(attempts: list[tuple[int, int | None]], attempt: int) -> str | None:
    """Why this attempt must not be made: a redelivered task, or an event already delivered."""
    if any(code is not None and is_delivered(code) for _, code in attempts):
        return "already delivered"
    if any(done >= attempt for done, _ in attempts):
        return f"attempt {attempt} was already made"
    return None
