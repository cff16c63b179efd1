"""Capacity: the per-tenant in-flight limit (429) and admit-queue backpressure (503), with Retry-After."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from db.tenants import TenantCredentials
from jobs.intake import BACKLOG_TTL_S
from jobs.queues import Queue, queue_depth

pytestmark = pytest.mark.integration

BODY = {"prompt": "a small boat"}


def test_inflight_limit_gets_429_until_a_job_finishes(
    client: TestClient, make_tenant: Callable[..., TenantCredentials], set_job: Callable[..., None]
) -> None:
    who = make_tenant(inflight_limit=2)
    first = client.post("/v1/generations", json=BODY, headers=who.auth_headers).json()["id"]
    second = client.post("/v1/generations", json=BODY, headers=who.auth_headers).json()["id"]
    set_job(second, status="processing")  # processing counts as in flight too

    refused = client.post("/v1/generations", json=BODY, headers=who.auth_headers)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "urn:reprise:problem:inflight-limit"

    other = make_tenant(inflight_limit=2)  # the limit is per tenant
    assert client.post("/v1/generations", json=BODY, headers=other.auth_headers).status_code == 202

    set_job(first, status="succeeded")
    assert client.post("/v1/generations", json=BODY, headers=who.auth_headers).status_code == 202


def test_a_long_admit_queue_gets_503(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, broker: redis.Redis
) -> None:
    client = make_client(queue_depth_limit=2, retry_after_s=7)
    for _ in range(2):
        assert client.post("/v1/generations", json=BODY, headers=tenant.auth_headers).status_code == 202
    broker.rpush(Queue.ADMIT.value, b"backlog")  # one more waiting than the limit allows
    time.sleep(BACKLOG_TTL_S + 0.05)  # the API asks the broker at most every BACKLOG_TTL_S
    refused = client.post("/v1/generations", json=BODY, headers=tenant.auth_headers)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "7"
    assert refused.json()["type"] == "urn:reprise:problem:overloaded"
    assert queue_depth(broker, Queue.ADMIT) == 3  # nothing was added


def test_a_replay_is_answered_even_while_the_admit_queue_is_long(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, broker: redis.Redis
) -> None:
    """A repeated Idempotency-Key adds nothing to the backlog: it gets its first job, where a new job
    and a used key with another body do not."""
    client = make_client(queue_depth_limit=1)
    keyed = {**tenant.auth_headers, "Idempotency-Key": "before-the-rush"}
    first = client.post("/v1/generations", json=BODY, headers=keyed)
    assert first.status_code == 202
    broker.rpush(Queue.ADMIT.value, b"backlog")  # two waiting, past the limit
    time.sleep(BACKLOG_TTL_S + 0.05)
    again = client.post("/v1/generations", json=BODY, headers=keyed)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    other_body = client.post("/v1/generations", json={"prompt": "a big boat"}, headers=keyed)
    assert other_body.status_code == 422 and other_body.json()["errors"][0]["field"] == "Idempotency-Key"
    new_key = client.post("/v1/generations", json=BODY, headers={**keyed, "Idempotency-Key": "in-the-rush"})
    assert new_key.status_code == 503 and new_key.json()["type"] == "urn:reprise:problem:overloaded"
    assert queue_depth(broker, Queue.ADMIT) == 2
