"""Priority and deadline on POST /v1/generations against the real Postgres and Redis: what the job
keeps and shows, the broker step each admission message lands on, the tenant's
cap on unfinished `high` jobs, and a deadline refused at once when its estimated finish is past it."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from core.settings import Settings
from db import queue_position
from db.engine import session_scope
from db.models import Job, Tenant, WorkerRoleRow
from db.tenants import TenantCredentials
from jobs.celery_messages import TaskMessages
from jobs.priority import broker_step
from jobs.queues import TaskName

pytestmark = pytest.mark.integration

ADMIT = TaskMessages(TaskName.ADMIT)


def queued_job_ids(broker: redis.Redis, step: int) -> list[str]:
    """The job ids of the admit messages waiting on one priority step's list, oldest first."""
    raw = reversed(broker.lrange(ADMIT.queue_for(step), 0, -1))  # LPUSHed: the oldest is last
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in raw]


def test_priority_and_deadline_are_kept_and_shown_on_the_job(
    client: TestClient, tenant: TenantCredentials
) -> None:
    asked = {"prompt": "a fox", "priority": "high", "deadline_s": 30, "on_deadline": "best_effort"}
    created = client.post("/v1/generations", json=asked, headers=tenant.auth_headers)
    assert created.status_code == 202, created.text
    shown = client.get(f"/v1/generations/{created.json()['id']}", headers=tenant.auth_headers).json()["input"]
    assert (shown["priority"], shown["deadline_s"], shown["on_deadline"]) == ("high", 30.0, "best_effort")
    plain = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "input"
    ]
    assert (plain["priority"], plain["deadline_s"], plain["on_deadline"]) == ("normal", None, "best_effort")
    bad = client.post(
        "/v1/generations", json={"prompt": "a fox", "priority": "urgent"}, headers=tenant.auth_headers
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "priority"


def test_each_admission_is_sent_at_its_priority_step(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, broker: redis.Redis
) -> None:
    client = make_client()
    ids: dict[str, list[str]] = {}
    for priority in ("normal", "low", "high", "normal"):
        response = client.post(
            "/v1/generations", json={"prompt": "a fox", "priority": priority}, headers=tenant.auth_headers
        )
        assert response.status_code == 202, response.text
        ids.setdefault(priority, []).append(response.json()["id"])
    for priority, job_ids in ids.items():
        assert queued_job_ids(broker, broker_step(priority)) == job_ids, priority


@pytest.fixture
def high_limited_tenant(
    make_tenant: Callable[..., TenantCredentials], api_settings: Settings
) -> TenantCredentials:
    tenant = make_tenant()
    with session_scope(api_settings) as session:
        session.execute(update(Tenant).where(Tenant.id == tenant.tenant_id).values(high_limit=2))
    return tenant


def test_a_tenant_past_its_high_limit_is_refused_with_a_429(
    make_client: Callable[..., TestClient], high_limited_tenant: TenantCredentials
) -> None:
    client = make_client()
    headers = high_limited_tenant.auth_headers

    def create(priority: str) -> int:
        body = {"prompt": "a fox", "priority": priority}
        return client.post("/v1/generations", json=body, headers=headers).status_code

    assert [create("high"), create("high")] == [202, 202]
    refused = client.post("/v1/generations", json={"prompt": "a fox", "priority": "high"}, headers=headers)
    assert refused.status_code == 429 and refused.json()["type"].endswith("high-priority-limit")
    assert int(refused.headers["retry-after"]) >= 1 and '"priority": "normal"' in refused.json()["detail"]
    assert create("normal") == 202  # the cap is on high alone
    listed = client.get("/v1/generations", headers=headers).json()["results"]
    assert sorted(job["input"]["priority"] for job in listed) == ["high", "high", "normal"]  # none made


@pytest.fixture
def slow_large_pool(api_settings: Settings, make_tenant: Callable[..., TenantCredentials]) -> Iterator[None]:
    """One large worker whose recent misses took 20 s each: a new miss ends in about 20 s and more."""
    worker = f"large-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    ids = [uuid.uuid4() for _ in range(3)]
    earlier = make_tenant()  # whose misses they were
    with session_scope(api_settings) as session:
        session.add(WorkerRoleRow(worker_name=worker, role="large"))
        ran = {"started_at": now - timedelta(seconds=20), "finished_at": now}
        request = {"prompt": "earlier", "seed": 1, "steps": 10, "width": 64, "height": 64, "guidance": 7.5}
        for job_id in ids:
            session.add(
                Job(
                    id=job_id, tenant_id=earlier.tenant_id, status="succeeded", route="miss", **ran, **request
                )
            )
    queue_position._means.clear()  # the route's mean is cached per process for seconds
    yield
    with session_scope(api_settings) as session:
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name == worker))
        session.execute(delete(Job).where(Job.id.in_(ids)))
    queue_position._means.clear()


def test_a_deadline_that_cannot_be_met_is_refused_at_once_when_asked(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, slow_large_pool: None
) -> None:
    client = make_client()
    headers = tenant.auth_headers

    def create(deadline_s: float, on_deadline: str) -> Any:
        body = {"prompt": "a fox", "deadline_s": deadline_s, "on_deadline": on_deadline}
        return client.post("/v1/generations", json=body, headers=headers)

    refused = create(5, "fail")
    assert refused.status_code == 422 and refused.json()["type"].endswith("deadline-unmet")
    assert refused.json()["errors"][0]["field"] == "deadline_s"
    assert "past its deadline_s of 5.0 s" in refused.json()["detail"]  # with the estimate it read
    assert client.get("/v1/generations", headers=headers).json()["results"] == []  # no job made
    assert create(5, "best_effort").status_code == 202  # late, but asked to run anyway
    assert create(86400, "fail").status_code == 202  # in time
