"""Idempotency-Key: a repeated request returns the first job; concurrent duplicates make one job."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from core.settings import Settings
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials
from jobs.queues import Queue, queue_depth

pytestmark = pytest.mark.integration

BODY = {"prompt": "a lighthouse at dusk", "steps": 30}


def post(client: TestClient, who: TenantCredentials, key: str, body: dict[str, object]) -> Any:
    """The TestClient's response (httpx or httpx2, whichever Starlette found)."""
    return client.post("/v1/generations", json=body, headers={**who.auth_headers, "Idempotency-Key": key})


def jobs_with_key(settings: Settings, who: TenantCredentials, key: str) -> int:
    with session_scope(settings) as session:
        query = (
            select(func.count())
            .select_from(Job)
            .where(Job.tenant_id == who.tenant_id, Job.idempotency_key == key)
        )
        return session.scalar(query) or 0


def test_same_key_and_body_returns_the_first_job_with_200(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis
) -> None:
    first = post(client, tenant, "order-1", BODY)
    again = post(client, tenant, "order-1", dict(reversed(list(BODY.items()))))  # key order is irrelevant
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()  # same id, same random seed
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert queue_depth(broker, Queue.ADMIT) == 1  # admitted once


def test_same_key_with_another_body_is_a_422_naming_the_header(
    client: TestClient, tenant: TenantCredentials
) -> None:
    assert post(client, tenant, "order-2", BODY).status_code == 202
    response = post(client, tenant, "order-2", {**BODY, "steps": 31})
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == "urn:reprise:problem:invalid-input"
    assert problem["errors"][0]["location"] == "header" and problem["errors"][0]["field"] == "Idempotency-Key"


def test_keys_are_per_tenant(client: TestClient, make_tenant: Callable[..., TenantCredentials]) -> None:
    one, two = make_tenant(), make_tenant()
    assert (
        post(client, one, "shared-key", BODY).json()["id"]
        != post(client, two, "shared-key", BODY).json()["id"]
    )


def test_a_replay_is_answered_even_at_the_inflight_limit(
    client: TestClient, make_tenant: Callable[..., TenantCredentials]
) -> None:
    who = make_tenant(inflight_limit=1)
    first = post(client, who, "order-3", BODY)
    assert post(client, who, "order-4", BODY).status_code == 429
    assert post(client, who, "order-3", BODY).json()["id"] == first.json()["id"]


@pytest.mark.parametrize("inflight_limit", [64, 1])  # at 1, the duplicates must still not get 429
def test_concurrent_duplicates_create_one_job(
    client: TestClient,
    make_tenant: Callable[..., TenantCredentials],
    api_settings: Settings,
    broker: redis.Redis,
    inflight_limit: int,
) -> None:
    who = make_tenant(inflight_limit=inflight_limit)
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda _: post(client, who, "burst", BODY), range(8)))
    assert sorted(r.status_code for r in responses) == [200] * 7 + [202]
    assert len({r.json()["id"] for r in responses}) == 1
    assert jobs_with_key(api_settings, who, "burst") == 1
    assert queue_depth(broker, Queue.ADMIT) == 1


def test_key_length_is_limited(client: TestClient, tenant: TenantCredentials) -> None:
    response = post(client, tenant, "k" * 256, BODY)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "Idempotency-Key"
