"""/v1/webhook-deliveries through the API: a delivery whose attempts are spent is kept as failed (the
dead letter), listed with its attempts and last error, a page at a time, to its tenant only, and
redelivered, one or a time range, by a task the worker runs as any other attempt. Against the real
database, Redis (the redelivery's Celery message) and a local receiver."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from fastapi.testclient import TestClient

from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.jobs import NewJob
from db.tenants import TenantCredentials
from db.webhooks import claim_attempt, finish_attempt
from jobs.queues import Queue
from jobs.webhooks import message_id
from tests.support.jobs import add_job
from workers.webhook_delivery import deliver_webhook

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"


class Receiver:
    def __init__(self) -> None:
        self.status = 500
        self.received = 0
        self.url = ""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            state.received += 1
            self.send_response(state.status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def two_attempts(api_settings: Settings) -> Settings:
    return api_settings.model_copy(update={"webhook_retry_delays_s": [0.0, 0.0]})


@pytest.fixture
def dead_letter(two_attempts: Settings, receiver: Receiver) -> Callable[[TenantCredentials], uuid.UUID]:
    """A succeeded job of the tenant whose completed event failed both its attempts (HTTP 500)."""

    def build(who: TenantCredentials) -> uuid.UUID:
        with session_scope(two_attempts) as session:
            new = NewJob(
                GenerationParams(prompt="a heron", seed=1),
                webhook_url=receiver.url,
                webhook_events_filter=["completed"],
            )
            job = add_job(session, who.tenant_id, new)
            job.status, job.started_at, job.finished_at = "succeeded", datetime.now(UTC), datetime.now(UTC)
            job_id = job.id
        for attempt in (1, 2):
            deliver_webhook(
                settings=two_attempts, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=attempt
            )
        return job_id

    return build


def queued_attempts(broker: redis.Redis) -> list[list[object]]:
    """The positional arguments of each message on the webhooks queue (Celery's protocol 2: the body
    is base64 JSON [args, kwargs, embed])."""
    messages = [json.loads(raw) for raw in broker.lrange(Queue.WEBHOOKS.value, 0, -1)]
    return [list(json.loads(base64.b64decode(message["body"]))[0]) for message in messages]


def test_a_dead_letter_is_listed_redelivered_and_then_delivered(
    client: TestClient,
    tenant: TenantCredentials,
    receiver: Receiver,
    two_attempts: Settings,
    dead_letter: Callable[[TenantCredentials], uuid.UUID],
    broker: redis.Redis,
) -> None:
    job_id = dead_letter(tenant)
    delivery_id = message_id(job_id, WebhookEvent.COMPLETED)
    listed = client.get("/v1/webhook-deliveries?status=failed", headers=tenant.auth_headers)
    assert listed.status_code == 200
    [failed] = listed.json()["results"]
    assert failed["id"] == delivery_id and failed["generation_id"] == str(job_id)
    assert (failed["status"], failed["attempts"], failed["last_status_code"]) == ("failed", 2, 500)
    assert failed["last_error"] == "HTTP 500" and failed["next_attempt_at"] is None
    assert (
        client.get("/v1/webhook-deliveries?status=delivered", headers=tenant.auth_headers).json()["results"]
        == []
    )

    redelivered = client.post(f"/v1/webhook-deliveries/{delivery_id}/redeliver", headers=tenant.auth_headers)
    assert redelivered.status_code == 202 and redelivered.json() == {"ids": [delivery_id], "more": False}
    assert queued_attempts(broker) == [[str(job_id), "generation.completed", 3]]

    receiver.status = 200  # the receiver is fixed; the worker runs the queued attempt
    outcome = deliver_webhook(settings=two_attempts, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=3)
    assert outcome.delivered and receiver.received == 3
    now = client.get(f"/v1/webhook-deliveries/{delivery_id}", headers=tenant.auth_headers).json()
    assert (now["status"], now["attempts"], now["last_status_code"], now["last_error"]) == (
        "delivered",
        3,
        200,
        None,
    )
    again = client.post(f"/v1/webhook-deliveries/{delivery_id}/redeliver", headers=tenant.auth_headers)
    assert again.status_code == 409 and again.headers["content-type"] == PROBLEM
    assert "only a failed one" in again.json()["detail"]


def test_deliveries_are_the_tenants_own(
    client: TestClient,
    make_tenant: Callable[..., TenantCredentials],
    dead_letter: Callable[[TenantCredentials], uuid.UUID],
) -> None:
    owner, other = make_tenant(), make_tenant()
    delivery_id = message_id(dead_letter(owner), WebhookEvent.COMPLETED)
    assert client.get("/v1/webhook-deliveries", headers=other.auth_headers).json()["results"] == []
    for answer in (
        client.get(f"/v1/webhook-deliveries/{delivery_id}", headers=other.auth_headers),
        client.post(f"/v1/webhook-deliveries/{delivery_id}/redeliver", headers=other.auth_headers),
    ):
        assert answer.status_code == 404 and answer.headers["content-type"] == PROBLEM
    assert client.get("/v1/webhook-deliveries").status_code == 401


def test_pages_follow_next_and_a_range_is_redelivered(
    client: TestClient,
    tenant: TenantCredentials,
    dead_letter: Callable[[TenantCredentials], uuid.UUID],
    broker: redis.Redis,
) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    jobs = [dead_letter(tenant) for _ in range(3)]
    first = client.get("/v1/webhook-deliveries?status=failed&limit=2", headers=tenant.auth_headers).json()
    assert len(first["results"]) == 2 and first["next"] is not None
    second = client.get(first["next"], headers=tenant.auth_headers).json()
    assert second["next"] is None
    seen = [d["generation_id"] for d in first["results"] + second["results"]]
    assert seen == [str(job) for job in reversed(jobs)]  # newest first, each once

    ranged = client.post(
        "/v1/webhook-deliveries/redeliver",
        params={"since": before.isoformat(), "until": (datetime.now(UTC) + timedelta(seconds=1)).isoformat()},
        headers=tenant.auth_headers,
    )
    assert ranged.status_code == 202 and ranged.json()["more"] is False
    assert ranged.json()["ids"] == [message_id(job, WebhookEvent.COMPLETED) for job in jobs]
    assert sorted(str(args[0]) for args in queued_attempts(broker)) == sorted(str(job) for job in jobs)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/webhook-deliveries?cursor=not-a-cursor",
        "/v1/webhook-deliveries?status=lost",
        "/v1/webhook-deliveries?limit=0",
    ],
)
def test_bad_listing_parameters_are_problems(
    client: TestClient, tenant: TenantCredentials, path: str
) -> None:
    answer = client.get(path, headers=tenant.auth_headers)
    assert answer.status_code == 422 and answer.headers["content-type"] == PROBLEM


@pytest.mark.parametrize(
    "params",
    [{"since": "2026-12-02T05:00:00"}, {"since": "2026-12-02T05:00:00Z", "until": "2026-12-01T00:00:00Z"}],
)
def test_a_bad_range_is_a_problem(
    client: TestClient, tenant: TenantCredentials, params: dict[str, str]
) -> None:
    answer = client.post("/v1/webhook-deliveries/redeliver", params=params, headers=tenant.auth_headers)
    assert answer.status_code == 422 and answer.headers["content-type"] == PROBLEM


def test_an_attempt_in_flight_or_unanswered_is_pending_not_failed(
    client: TestClient, tenant: TenantCredentials, two_attempts: Settings
) -> None:
    """The last attempt of a schedule, claimed and still running, has no next attempt yet is no dead
    letter; an attempt that got no answer (a refused connection) with a retry scheduled is pending."""
    with session_scope(two_attempts) as session:
        new = NewJob(GenerationParams(prompt="a heron"), webhook_url="http://127.0.0.1:9/h")
        jobs = [add_job(session, tenant.tenant_id, new).id for _ in range(2)]
    running, unanswered = (message_id(job, WebhookEvent.COMPLETED) for job in jobs)
    with session_scope(two_attempts) as session:
        for job, delivery, retry in ((jobs[0], running, None), (jobs[1], unanswered, datetime.now(UTC))):
            claimed = claim_attempt(
                session,
                job_id=job,
                message_id=delivery,
                event=WebhookEvent.COMPLETED.value,
                url="http://127.0.0.1:9/h",
                attempt=2,
                next_attempt_at=None,
            )
            assert claimed is not None
            if delivery == unanswered:
                finish_attempt(
                    session,
                    delivery_id=claimed,
                    status_code=None,
                    error="ConnectError",
                    next_attempt_at=retry,
                )
    pending = client.get("/v1/webhook-deliveries?status=pending", headers=tenant.auth_headers).json()
    assert {d["id"] for d in pending["results"]} == {running, unanswered}
    failed = client.get("/v1/webhook-deliveries?status=failed", headers=tenant.auth_headers).json()
    assert failed["results"] == []
    refused = client.post(f"/v1/webhook-deliveries/{running}/redeliver", headers=tenant.auth_headers)
    assert refused.status_code == 409  # not while its attempt runs
