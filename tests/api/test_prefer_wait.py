"""`Prefer: wait=N` on create and read (Replicate's sync mode): the answer comes when the job ends, or
after N seconds, woken by the worker's announcement (jobs.job_events) or the periodic look at the row."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from api.waiting import DEFAULT_WAIT_S, MAX_WAIT_S, preferred_wait
from db.tenants import TenantCredentials
from jobs.job_events import announce_end

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("wait=5", 5),
        ('respond-async, wait="7"', 7),
        ("wait=0", 1),
        ("wait=999", MAX_WAIT_S),
        ("handling=lenient", None),
        ("wait=soon", None),
        ("wait", DEFAULT_WAIT_S),
        ("respond-async; WAIT ", 60),
        ("wait=", None),
    ],
)
def test_the_wait_preference_is_read_as_rfc_7240_says(header: str | None, seconds: int | None) -> None:
    assert preferred_wait(header) == seconds


def test_a_read_is_held_until_the_job_ends(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], broker: redis.Redis
) -> None:
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]

    def finish() -> None:
        time.sleep(0.5)
        set_job(job_id, status="succeeded")
        announce_end(broker, uuid.UUID(job_id))

    threading.Thread(target=finish).start()
    started = time.monotonic()
    response = client.get(f"/v1/generations/{job_id}", headers={**tenant.auth_headers, "Prefer": "wait=20"})
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["status"] == "succeeded"
    assert response.headers["preference-applied"] == "wait=20"
    assert 0.4 < elapsed < 5  # woken by the announcement, not by the 20 s


def test_a_bare_wait_holds_a_create_for_the_default_wait_until_the_job_ends(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], broker: redis.Redis
) -> None:
    assert DEFAULT_WAIT_S == MAX_WAIT_S == 60  # Replicate's: a bare `Prefer: wait` holds up to 60 s
    created: list[str] = []

    def finish() -> None:
        deadline = time.monotonic() + 10
        while not (found := client_jobs(client, tenant)) and time.monotonic() < deadline:
            time.sleep(0.1)
        created.extend(found)
        time.sleep(0.5)
        set_job(found[0], status="succeeded")
        announce_end(broker, uuid.UUID(found[0]))

    threading.Thread(target=finish).start()
    started = time.monotonic()
    response = client.post(
        "/v1/generations", json={"prompt": "a fox"}, headers={**tenant.auth_headers, "Prefer": "wait"}
    )
    assert response.status_code == 202 and response.json()["status"] == "succeeded"
    assert response.headers["preference-applied"] == f"wait={DEFAULT_WAIT_S}"
    assert response.json()["id"] == created[0]
    assert 0.4 < time.monotonic() - started < 10  # held past the creation, woken by the end


def client_jobs(client: TestClient, tenant: TenantCredentials) -> list[str]:
    listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
    return [job["id"] for job in listed]


def test_a_job_that_does_not_end_is_answered_after_the_wait(
    client: TestClient, tenant: TenantCredentials
) -> None:
    started = time.monotonic()
    response = client.post(
        "/v1/generations", json={"prompt": "a fox"}, headers={**tenant.auth_headers, "Prefer": "wait=1"}
    )
    assert response.status_code == 202 and response.json()["status"] == "starting"
    assert response.headers["preference-applied"] == "wait=1"
    assert 0.9 < time.monotonic() - started < 4


def test_without_the_preference_nothing_waits(client: TestClient, tenant: TenantCredentials) -> None:
    created = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers)
    response = client.get(f"/v1/generations/{created.json()['id']}", headers=tenant.auth_headers)
    assert response.status_code == 200 and "preference-applied" not in response.headers
