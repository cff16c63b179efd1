"""Prompt redelivery (workers.webhook_delivery.follow_endpoint) against Postgres, the broker's Redis and
a real local receiver: once an endpoint answers 2xx after failures, its waiting deliveries are queued
at once; an endpoint that stays down keeps its schedule."""

from __future__ import annotations

import ast
import json
import time
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
from jobs.passes.webhook_probes import probe_endpoints
from jobs.policies.webhook_recovery import PROBING, endpoint_of, failing_key
from jobs.queues import Queue
from tests.workers.test_webhook_delivery import Receiver, attempts, hook_settings, make_job, receiver
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
    return [(ast.literal_eval(m["headers"]["argsrepr"]), m["headers"]["eta"]) for m in messages]


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


def test_an_endpoint_that_comes_back_unprompted_is_found_by_the_reconciler_s_probe(
    receiver: Receiver,
    tenant: TenantCredentials,
    slow_schedule: Settings,
    make_job: Callable[..., uuid.UUID],
    broker: redis.Redis,
) -> None:
    """Every job ended during the outage: no new event will show the endpoint is back; a probe does."""
    dispatcher = CeleryDispatcher(make_celery_app(slow_schedule))
    endpoint = endpoint_of(receiver.url)
    broker.delete(failing_key(receiver.url))
    broker.zrem(PROBING, endpoint)

    def run(job_id: uuid.UUID, attempt: int = 1, *, probe: bool = False) -> None:
        run_delivery(
            settings=slow_schedule,
            job_id=job_id,
            event=WebhookEvent.COMPLETED,
            attempt=attempt,
            dispatcher=dispatcher,
            broker=broker,
            probe=probe,
        )

    receiver.statuses = [503, 503, 503]  # two deliveries, then the first probe, fail
    first, second = make_job(tenant, receiver.url), make_job(tenant, receiver.url)
    run(first)
    run(second)
    due = next_attempt_of(slow_schedule, first)
    broker.delete(Queue.WEBHOOKS.value)

    periods = iter(range(1, 10))

    def probe_now() -> list[tuple[list[object], object]]:
        """The reconciler's pass a probe period after the last one."""
        later = time.time() + next(periods) * (slow_schedule.webhook_probe_s + 1)
        probe_endpoints(slow_schedule, dispatcher, broker, now=later)
        sent = queued(broker)
        broker.delete(Queue.WEBHOOKS.value)
        return [(args, eta) for args, eta in sent if args[0] in (str(first), str(second))]  # others' aside

    probe_endpoints(slow_schedule, dispatcher, broker, now=time.time())  # not yet a period: nothing
    assert not [args for args, _eta in queued(broker) if args[0] in (str(first), str(second))]
    [(args, eta)] = probe_now()  # one probe per endpoint: the earliest waiting event, now
    assert args[2:] == [2, True] and eta is None
    run(uuid.UUID(str(args[0])), attempt=2, probe=True)  # still down: the probe fails...
    assert len(attempts(slow_schedule, first)) == len(attempts(slow_schedule, second)) == 1
    assert next_attempt_of(slow_schedule, first) == due  # ...and no schedule moved

    [(args, _eta)] = probe_now()  # up again (the receiver answers 200 from now on)
    run(uuid.UUID(str(args[0])), attempt=2, probe=True)
    swept = queued(broker)  # the probe's success sent the other waiting delivery at once
    broker.delete(Queue.WEBHOOKS.value)
    assert [a[0] for a, _ in swept] == [str(second if args[0] == str(first) else first)]
    assert not broker.exists(failing_key(receiver.url)) and broker.zscore(PROBING, endpoint) is None
    assert probe_now() == []  # nothing left to probe
