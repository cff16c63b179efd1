"""Capacity: the per-tenant in-flight limit (429) and admit-queue backpressure (503), with Retry-After."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from api.deps import BACKLOG_TTL_S
from db.tenants import TenantCredentials
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
