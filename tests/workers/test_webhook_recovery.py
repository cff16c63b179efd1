"""Prompt redelivery (workers.webhook_delivery.follow_endpoint) against Postgres, the broker's Redis and
a real local receiver: once an endpoint answers 2xx after failures, its waiting deliveries are queued
at once; an endpoint that stays down keeps its schedule."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import select

from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.models import WebhookDelivery
from db.tenants import TenantCredentials
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.policies.webhook_recovery import failing_key
from jobs.queues import Queue
from tests.workers.test_webhook_delivery import Receiver, hook_settings, make_job, receiver
from workers.webhook_delivery import deliver_webhook, run_delivery

pytestmark = pytest.mark.integration
__all__ = ["hook_settings", "make_job", "receiver"]  # the fixtures this module shares

DOWN = "http://127.0.0.1:1/hooks"  # a closed port: an endpoint that stays down


@pytest.fixture
def slow_schedule(hook_settings: Settings) -> Settings:
    """Retries a minute apart: anything sent within the test was sent by the recovery."""
    return hook_settings.model_copy(update={"webhook_retry_delays_s": [0.0, 60.0, 60.0]})


def queued(broker: redis.Redis) -> list[tuple[list[object], object]]:
    """(args, eta) of each message on the webhooks queue."""
    messages = [json.loads(raw) for raw in broker.lrange(Queue.WEBHOOKS.value, 0, -1)]
    return [(json.loads(m["headers"]["argsrepr"].replace("'", '"')), m["headers"]["eta"]) for m in messages]


def next_attempt_of(settings: Settings, job_id: uuid.UUID) -> datetime | None:
    with session_scope(settings) as session:
        return session.scalars(
            select(WebhookDelivery.next_attempt_at)
            .where(WebhookDelivery.job_id == job_id)
            .order_by(WebhookDelivery.attempt.desc())
        ).first()


def test_a_success_sends_the_endpoint_s_waiting_deliveries_now(
    receiver: Receiver,
    tenant: TenantCredentials,
    slow_schedule: Settings,
    make_job: Callable[..., uuid.UUID],
    broker: redis.Redis,
) -> None:
    dispatcher = CeleryDispatcher(make_celery_app(slow_schedule))
    broker.delete(failing_key(receiver.url), failing_key(DOWN))

    def run(job_id: uuid.UUID, attempt: int = 1) -> None:
        run_delivery(
            settings=slow_schedule,
            job_id=job_id,
            event=WebhookEvent.COMPLETED,
            attempt=attempt,
            dispatcher=dispatcher,
            broker=broker,
        )

    receiver.statuses = [503, 503]  # the endpoint is down for two deliveries
    first, second, recovering, stays_down = (
        make_job(tenant, url) for url in (receiver.url, receiver.url + "/other", receiver.url, DOWN)
    )
    for job_id in (first, second, stays_down):
        run(job_id)
    # Each failure queued its next attempt a minute ahead, and marked its endpoint.
    assert [eta is not None for _args, eta in queued(broker)] == [True, True, True]
    assert broker.exists(failing_key(receiver.url)) and broker.exists(failing_key(DOWN))
    broker.delete(Queue.WEBHOOKS.value)
    down_due = next_attempt_of(slow_schedule, stays_down)

    run(recovering)  # answered 200: the endpoint is up again
    sent_now = queued(broker)
    assert sorted(str(args[0]) for args, _eta in sent_now) == sorted([str(first), str(second)])
    assert all(args[1:] == ["generation.completed", 2] and eta is None for args, eta in sent_now)
    assert not broker.exists(failing_key(receiver.url))  # taken by that success
    # The endpoint that stays down keeps its schedule: its mark, its slot, nothing sent early.
    assert broker.exists(failing_key(DOWN)) and next_attempt_of(slow_schedule, stays_down) == down_due

    # The attempts sent now are delivered; the scheduled copies of them, when they come, are skipped.
    broker.delete(Queue.WEBHOOKS.value)
    for job_id in (first, second):
        run(job_id, attempt=2)
        again = deliver_webhook(
            settings=slow_schedule, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=2
        )
        assert again.skipped == "already delivered"
    assert queued(broker) == []  # a success with no mark sends nothing
    codes = [headers["webhook-id"] for headers, _body in receiver.received]
    assert len(codes) == 5 and len(set(codes)) == 3  # 2 failures, then one 2xx per event
    assert next_attempt_of(slow_schedule, stays_down) is not None
    assert datetime.now(UTC) < down_due  # type: ignore[operator]
