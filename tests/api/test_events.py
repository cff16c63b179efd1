"""GET /v1/generations/{id}/events against the real database and Redis: the job now, each change a
worker announces (start, progress), then `done` and the end of the stream; errors as problem+json."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from db.tenants import TenantCredentials
from jobs.job_events import announce_end, announce_progress, announce_started

pytestmark = pytest.mark.integration


def _events(lines: list[str]) -> list[tuple[str, dict[str, Any]]]:
    found, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: ") and name is not None:
            found.append((name, json.loads(line.removeprefix("data: "))))
    return found


def test_a_stream_follows_the_job_through_its_announcements_to_done(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], broker: redis.Redis
) -> None:
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]

    def work() -> None:  # what a worker does, with the pauses of a run
        time.sleep(0.6)
        set_job(job_id, status="processing", started_at=time_now())
        announce_started(broker, uuid.UUID(job_id))
        for step in (1, 10, 20):
            time.sleep(0.4)
            set_job(job_id, progress_step=step, progress_total=20)
            announce_progress(broker, uuid.UUID(job_id), step=step, total=20)
        time.sleep(0.4)
        set_job(job_id, status="succeeded", finished_at=time_now())
        announce_end(broker, uuid.UUID(job_id))

    threading.Thread(target=work).start()
    started = time.monotonic()
    with client.stream("GET", f"/v1/generations/{job_id}/events", headers=tenant.auth_headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = list(response.iter_lines())
    elapsed = time.monotonic() - started
    events = _events(lines)
    assert lines[0] == "retry: 2000"
    assert [name for name, _ in events][-1] == "done" and events[-1][1]["status"] == "succeeded"
    statuses = [body["status"] for _, body in events]
    assert statuses[0] == "starting" and events[0][1]["queue"]["position"] >= 1
    steps = [
        body["progress"]["step"] for _, body in events if body["status"] == "processing" and body["progress"]
    ]
    assert steps == [1, 10, 20]  # each announcement woke the stream (the recheck is every 5 s)
    assert elapsed < 4.5


def test_a_finished_job_gives_done_at_once(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]
    set_job(job_id, status="failed", error="invalid input: no", finished_at=time_now())
    with client.stream("GET", f"/v1/generations/{job_id}/events", headers=tenant.auth_headers) as response:
        events = _events(list(response.iter_lines()))
    assert events == [("done", events[0][1])] and events[0][1]["error"] == "invalid input: no"


def test_another_tenants_job_and_a_missing_key_are_problems(
    client: TestClient, tenant: TenantCredentials, make_tenant: Callable[..., TenantCredentials]
) -> None:
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]
    other = make_tenant()
    response = client.get(f"/v1/generations/{job_id}/events", headers=other.auth_headers)
    assert response.status_code == 404 and response.headers["content-type"] == "application/problem+json"
    assert client.get(f"/v1/generations/{job_id}/events").status_code == 401


def time_now() -> object:
    from datetime import UTC, datetime

    return datetime.now(UTC)
