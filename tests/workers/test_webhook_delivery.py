"""Webhook delivery (workers.webhook_delivery) to a real local HTTP receiver: signatures, attempts
recorded, retries, 410 Gone, and the SSRF check at send time."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.jobs import NewJob
from db.models import Job, WebhookDelivery
from db.tenants import TenantCredentials
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.passes.reconcile import enqueue_due_retries
from jobs.queues import Queue, TaskName
from jobs.webhooks import message_id, verify
from tests.support.jobs import add_job
from workers.webhook_delivery import deliver_webhook, run_delivery

pytestmark = pytest.mark.integration


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that answers scripted statuses and keeps what it received."""

    url: str
    statuses: list[int]
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="", statuses=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            state.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(state.statuses.pop(0) if state.statuses else 200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/reprise"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def hook_settings(api_settings: Settings) -> Settings:
    return api_settings.model_copy(
        update={"webhook_retry_delays_s": [0.0, 0.5, 60.0], "public_base_url": "https://api.example.com"}
    )


@pytest.fixture
def make_job(hook_settings: Settings) -> Callable[..., uuid.UUID]:
    """A job with a webhook, in a given status, as the workers would leave it."""

    def build(
        who: TenantCredentials, url: str, *, status: str = "succeeded", events: list[str] | None = None
    ) -> uuid.UUID:
        with session_scope(hook_settings) as session:
            new = NewJob(
                GenerationParams(prompt="a heron", seed=1),
                webhook_url=url,
                webhook_events_filter=events or ["start", "completed"],
            )
            job = add_job(session, who.tenant_id, new)
            now = datetime.now(UTC)
            job.status, job.started_at, job.finished_at = status, now, now
            return job.id

    return build


def attempts(settings: Settings, job_id: uuid.UUID) -> list[tuple[int, int | None, str | None, bool]]:
    """(attempt, status code, error, retry scheduled) of each recorded attempt."""
    with session_scope(settings) as session:
        rows = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.job_id == job_id).order_by(WebhookDelivery.id)
        ).all()
        return [(row.attempt, row.status_code, row.error, row.next_attempt_at is not None) for row in rows]


def test_500_then_200_is_two_signed_attempts_of_one_message(
    receiver: Receiver,
    tenant: TenantCredentials,
    hook_settings: Settings,
    make_job: Callable[..., uuid.UUID],
    make_client: Callable[..., TestClient],
) -> None:
    receiver.statuses = [500, 200]
    job_id = make_job(tenant, receiver.url)

    first = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=1)
    assert (first.status_code, first.delivered, first.retry_in) == (500, False, 0.5)
    second = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=2)
    assert (second.status_code, second.delivered, second.retry_in) == (200, True, None)

    assert attempts(hook_settings, job_id) == [(1, 500, "HTTP 500", True), (2, 200, None, False)]
    (headers_1, _body_1), (headers_2, body_2) = receiver.received
    assert headers_1["webhook-id"] == headers_2["webhook-id"] == message_id(job_id, WebhookEvent.COMPLETED)
    for headers, body in receiver.received:
        verify(tenant.webhook_secret, headers, body)  # raises unless signed with the tenant's secret
        assert headers["content-type"] == "application/json"
    payload = json.loads(body_2)
    assert payload["type"] == "generation.completed"
    # The data is the job object exactly as GET returns it.
    client = make_client(public_base_url="https://api.example.com")
    assert payload["data"] == client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()


def test_a_redelivered_task_does_not_post_again(
    receiver: Receiver, tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, receiver.url)
    deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=1)
    again = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=1)
    later = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=2)
    assert again.skipped == "already delivered" and later.skipped == "already delivered"
    assert len(receiver.received) == 1


def test_the_schedule_ends_the_retries(
    receiver: Receiver, tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    receiver.statuses = [503, 503, 503]
    job_id = make_job(tenant, receiver.url)
    outcomes = [
        deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=n)
        for n in (1, 2, 3)
    ]
    assert [o.retry_in for o in outcomes] == [0.5, 60.0, None]  # three delays: three attempts
    assert [a[3] for a in attempts(hook_settings, job_id)] == [True, True, False]


def test_410_gone_stops_deliveries_to_that_url_for_the_tenant(
    receiver: Receiver,
    make_tenant: Callable[..., TenantCredentials],
    hook_settings: Settings,
    make_job: Callable[..., uuid.UUID],
) -> None:
    owner, other = make_tenant(), make_tenant()
    receiver.statuses = [410]
    job_id = make_job(owner, receiver.url)
    gone = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.STARTED, attempt=1)
    assert (gone.status_code, gone.retry_in) == (410, None)

    after = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=1)
    sibling = make_job(owner, receiver.url)
    of_sibling = deliver_webhook(
        settings=hook_settings, job_id=sibling, event=WebhookEvent.COMPLETED, attempt=1
    )
    assert after.skipped == of_sibling.skipped == "the URL answered 410 Gone earlier"
    assert len(receiver.received) == 1

    # Another tenant's use of the same URL is its own business.
    theirs = make_job(other, receiver.url)
    assert deliver_webhook(settings=hook_settings, job_id=theirs, event=WebhookEvent.COMPLETED).delivered


def test_unwanted_events_are_not_sent(
    receiver: Receiver, tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, receiver.url, events=["completed"])
    outcome = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.STARTED)
    assert outcome.skipped == "the job did not ask for this event" and receiver.received == []


def test_a_private_address_is_refused_at_send_time_without_retry(
    receiver: Receiver, tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, receiver.url)  # accepted while 127.0.0.1 was allowed
    strict = hook_settings.model_copy(update={"webhook_allow_hosts": []})
    outcome = deliver_webhook(settings=strict, job_id=job_id, event=WebhookEvent.COMPLETED)
    assert outcome.retry_in is None and not outcome.delivered
    [(_attempt, code, error, retry)] = attempts(strict, job_id)
    assert code is None and error is not None and error.startswith("refused: ") and not retry
    assert receiver.received == []


def test_dns_rebinding_is_refused(
    tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, "http://hooks.example.com/x")

    def rebound(host: str, port: int) -> list[str]:
        return ["10.0.0.5"]  # public at submission, private now

    outcome = deliver_webhook(
        settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, resolver=rebound
    )
    assert outcome.error is not None and "10.0.0.5" in outcome.error


def test_a_host_that_does_not_resolve_is_retried(
    tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, "http://hooks.example.com/x")

    def dns_down(host: str, port: int) -> list[str]:
        raise OSError("temporary failure in name resolution")

    outcome = deliver_webhook(
        settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, resolver=dns_down
    )
    assert outcome.retry_in == 0.5 and outcome.error == "webhook host 'hooks.example.com' does not resolve"


def test_the_post_goes_to_the_checked_address(
    receiver: Receiver, tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    port = receiver.url.split(":")[2].split("/")[0]
    job_id = make_job(tenant, f"http://hooks.invalid:{port}/x")

    def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # the system resolver would not know hooks.invalid

    outcome = deliver_webhook(
        settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED, resolver=resolve
    )
    assert outcome.delivered
    assert receiver.received[0][0]["host"] == f"hooks.invalid:{port}"


def test_a_closed_port_is_a_failed_attempt_to_retry(
    tenant: TenantCredentials, hook_settings: Settings, make_job: Callable[..., uuid.UUID]
) -> None:
    job_id = make_job(tenant, "http://127.0.0.1:1/x")
    outcome = deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED)
    assert (
        outcome.status_code is None and outcome.error is not None and outcome.error.startswith("ConnectError")
    )
    assert outcome.retry_in == 0.5


def test_run_delivery_queues_the_next_attempt(
    tenant: TenantCredentials,
    hook_settings: Settings,
    make_job: Callable[..., uuid.UUID],
    broker: redis.Redis,
) -> None:
    job_id = make_job(tenant, "http://127.0.0.1:1/x")
    dispatcher = CeleryDispatcher(make_celery_app(hook_settings))
    run_delivery(
        settings=hook_settings,
        job_id=job_id,
        event=WebhookEvent.COMPLETED,
        dispatcher=dispatcher,
        broker=broker,
    )
    assert broker.llen(Queue.WEBHOOKS.value) == 1
    message = json.loads(broker.lindex(Queue.WEBHOOKS.value, 0))  # type: ignore[arg-type]
    assert message["headers"]["task"] == TaskName.DELIVER_WEBHOOK.value
    assert message["headers"]["argsrepr"] == repr([str(job_id), "generation.completed", 2])
    assert message["headers"]["eta"] is not None  # held back by the schedule's delay


def test_enqueue_due_retries_sends_long_waits_and_lost_retries(
    tenant: TenantCredentials,
    hook_settings: Settings,
    make_job: Callable[..., uuid.UUID],
    broker: redis.Redis,
) -> None:
    long_wait, lost, not_due = (make_job(tenant, "http://127.0.0.1:1/x") for _ in range(3))
    now = datetime.now(UTC)
    for job_id in (long_wait, lost, not_due):
        deliver_webhook(settings=hook_settings, job_id=job_id, event=WebhookEvent.COMPLETED)
    with session_scope(hook_settings) as session:
        # long_wait: due now after a wait longer than a countdown may be; lost: a short retry long overdue.
        for job_id, created, due in [
            (long_wait, now - timedelta(hours=2), now - timedelta(seconds=1)),
            (lost, now - timedelta(hours=1), now - timedelta(minutes=59)),
            (not_due, now, now + timedelta(seconds=30)),
        ]:
            session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.job_id == job_id)
                .values(created_at=created, next_attempt_at=due)
            )
    dispatcher = CeleryDispatcher(make_celery_app(hook_settings))
    # Other tests' pending retries may be due too: count only ours.
    enqueue_due_retries(settings=hook_settings, dispatcher=dispatcher, now=now)
    queued = [json.loads(raw)["headers"]["argsrepr"] for raw in broker.lrange(Queue.WEBHOOKS.value, 0, -1)]
    ours = {args for args in queued if str(not_due) in args or str(long_wait) in args or str(lost) in args}
    assert ours == {
        repr([str(long_wait), "generation.completed", 2]),
        repr([str(lost), "generation.completed", 2]),
    }


def test_enqueue_due_retries_sends_events_never_attempted(
    receiver: Receiver,
    make_tenant: Callable[..., TenantCredentials],
    hook_settings: Settings,
    make_job: Callable[..., uuid.UUID],
    broker: redis.Redis,
) -> None:
    who = make_tenant()
    forgotten, recent, to_gone_url, gone_probe = (
        make_job(who, url, events=["completed"])
        for url in ("http://127.0.0.1:1/a", "http://127.0.0.1:1/b", receiver.url, receiver.url)
    )
    receiver.statuses = [410]
    deliver_webhook(settings=hook_settings, job_id=gone_probe, event=WebhookEvent.COMPLETED)
    now = datetime.now(UTC)
    with session_scope(hook_settings) as session:
        session.execute(
            update(Job)
            .where(Job.id.in_([forgotten, to_gone_url]))
            .values(started_at=now - timedelta(minutes=10), finished_at=now - timedelta(minutes=10))
        )
    enqueue_due_retries(
        settings=hook_settings, dispatcher=CeleryDispatcher(make_celery_app(hook_settings)), now=now
    )
    queued = {json.loads(raw)["headers"]["argsrepr"] for raw in broker.lrange(Queue.WEBHOOKS.value, 0, -1)}
    ours = {args for args in queued if any(str(job) in args for job in (forgotten, recent, to_gone_url))}
    # Only the completed event (the filter), only once it is overdue, never to a URL that is gone.
    assert ours == {repr([str(forgotten), "generation.completed", 1])}
