"""Priority on the live stack: a `high` request submitted behind 50 `normal` ones is admitted and run
ahead of them (its messages at kombu's step 0, theirs at step 3: jobs.priority), and a deadline that
cannot be met is refused at once when the request asks for that."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack, make_tenant

pytestmark = pytest.mark.integration

NORMALS = 50
# What may start before the high request arrives: the jobs a large worker already holds (its batch's
# slots and the message it prefetched) when the high one reaches its queue.
ALREADY_TAKEN = 10


def test_a_high_request_behind_50_normal_ones_starts_before_them(stack: Stack) -> None:
    tenant = make_tenant(stack.settings, f"priority-{uuid.uuid4().hex[:8]}")
    with httpx.Client(base_url=stack.base_url, headers=tenant.auth_headers, timeout=60) as api:

        def create(seed: int, **extra: Any) -> str:
            body = {
                "prompt": "a small red circle left of a blue square",
                "seed": seed,
                "cache": "off",
                **extra,
            }
            response = api.post("/v1/generations", json=body)
            assert response.status_code == 202, response.text
            return str(response.json()["id"])

        normals = [create(seed) for seed in range(NORMALS)]
        high = create(NORMALS, priority="high")
        assert api.get(f"/v1/generations/{high}").json()["input"]["priority"] == "high"
        started = {job_id: _started(api, job_id) for job_id in [high, *normals]}
    after = [job_id for job_id in normals if started[job_id] > started[high]]
    assert len(after) >= NORMALS - ALREADY_TAKEN, (len(after), started[high])


def _started(api: httpx.Client, job_id: str, timeout_s: float = 600.0) -> datetime:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = api.get(f"/v1/generations/{job_id}", headers={"Prefer": "wait=30"}).json()
        if job["status"] in ("succeeded", "failed", "canceled"):
            assert job["status"] == "succeeded", job["error"]
            return datetime.fromisoformat(job["started_at"])
    raise AssertionError(f"job {job_id} did not end within {timeout_s} s")


def test_a_deadline_that_cannot_be_met_is_refused_at_once(stack: Stack) -> None:
    tenant = make_tenant(stack.settings, f"deadline-{uuid.uuid4().hex[:8]}")
    with httpx.Client(base_url=stack.base_url, headers=tenant.auth_headers, timeout=60) as api:
        done = api.post(  # one miss first, so that the route has a run time to estimate with
            "/v1/generations",
            json={"prompt": "a blue square", "seed": 1, "cache": "off"},
            headers={"Prefer": "wait=60"},
        )
        assert done.json()["status"] == "succeeded"
        body = {"prompt": "a red circle", "cache": "off", "deadline_s": 0.001, "on_deadline": "fail"}
        refused = api.post("/v1/generations", json=body)
        assert refused.status_code == 422 and refused.json()["type"].endswith("deadline-unmet"), refused.text
        accepted = api.post("/v1/generations", json={**body, "on_deadline": "best_effort"})
        assert accepted.status_code == 202 and accepted.json()["input"]["deadline_s"] == 0.001
