"""Video jobs through POST /v1/generations (FlexCache): `kind`, frames, fps and noise_window, their checks,
the row they make and the job object they read back as."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from api.schemas import GenerationCreate
from core.settings import Settings
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials
from jobs.queues import Queue, queue_depth

pytestmark = pytest.mark.integration

PROMPT = "a red kite over a beach"


def post(client: TestClient, who: TenantCredentials, body: dict[str, Any], **headers: str) -> Any:
    return client.post(
        "/v1/generations", json={"prompt": PROMPT, **body}, headers={**who.auth_headers, **headers}
    )


def row(settings: Settings, job_id: str) -> Job:
    with session_scope(settings) as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        session.expunge(job)
        return job


def test_a_video_job_is_queued_like_an_image_job_with_its_frames(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, api_settings: Settings
) -> None:
    body = {"kind": "video", "frames": 24, "fps": 12, "noise_window": 8, "seed": 3, "width": 64, "height": 48}
    response = post(client, tenant, body)
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["kind"], job["status"], job["output"]) == ("video", "starting", None)
    assert job["input"] == {
        "prompt": PROMPT,
        "negative_prompt": None,
        "seed": 3,
        "steps": 50,
        "width": 64,
        "height": 48,
        "guidance": 7.5,
        "cache": "auto",
        "decode": "lazy",
        "webhook": None,
        "webhook_events_filter": ["completed", "start"],
        "frames": 24,
        "fps": 12,
        "noise_window": 8,
        "priority": "normal",
        "deadline_s": None,
        "on_deadline": "best_effort",
    }
    base = f"http://testserver/v1/generations/{job['id']}"
    assert job["urls"] == {"self": base, "cancel": f"{base}/cancel", "video": f"{base}/video"}
    assert job["metrics"]["video_hit"] is None and job["metrics"]["background_entry"] is None
    stored = row(api_settings, job["id"])
    assert (stored.kind, stored.frames, stored.fps, stored.noise_window) == ("video", 24, 12, 8)
    assert queue_depth(broker, Queue.ADMIT) == 1  # the same queue, the same admission


def test_a_video_job_takes_the_default_frames_rate_and_size(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings
) -> None:
    job = post(client, tenant, {"kind": "video"}).json()
    size = api_settings.effective_default_size  # the images' default size
    expected = {"frames": 16, "fps": 8, "noise_window": None, "width": size, "height": size}
    assert {name: job["input"][name] for name in expected} == expected
    stored = row(api_settings, job["id"])
    assert (stored.kind, stored.frames, stored.fps, stored.noise_window) == ("video", 16, 8, None)


def test_an_image_job_reads_as_before_with_its_kind(client: TestClient, tenant: TenantCredentials) -> None:
    job = post(client, tenant, {"kind": "image"}).json()
    assert job["kind"] == "image"
    assert not {"frames", "fps", "noise_window"} & set(job["input"])
    assert not {"video_hit", "background_entry"} & set(job["metrics"])
    assert set(job["urls"]) == {"self", "cancel", "image"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"frames": 16}, "frames"),  # an image job
        ({"kind": "image", "fps": 8}, "fps"),
        ({"noise_window": 4}, "noise_window"),
        ({"kind": "video", "frames": 0}, "frames"),
        ({"kind": "video", "frames": 129}, "frames"),
        ({"kind": "video", "fps": 0}, "fps"),
        ({"kind": "video", "fps": 61}, "fps"),
        ({"kind": "video", "frames": 8, "noise_window": 9}, "noise_window"),
        ({"kind": "video", "noise_window": 0}, "noise_window"),
        ({"kind": "video", "width": 63}, "width"),  # the image checks hold for videos too
        ({"kind": "gif"}, "kind"),
    ],
)
def test_invalid_video_fields_are_422_problems_naming_the_field(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, body: dict[str, Any], field: str
) -> None:
    response = post(client, tenant, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:reprise:problem:invalid-input"
    assert [(e["location"], e["field"]) for e in problem["errors"]] == [("body", field)]
    assert queue_depth(broker, Queue.ADMIT) == 0


def test_a_video_field_sent_with_an_image_kind_says_what_to_send(
    client: TestClient, tenant: TenantCredentials
) -> None:
    detail = post(client, tenant, {"frames": 16}).json()["detail"]
    assert "video jobs only" in detail and '"kind": "video"' in detail


def test_an_image_body_keeps_the_fingerprint_it_had_before_video_jobs() -> None:
    # the canonical body of an image request before video jobs: no decode (lazy), no video fields
    old = {
        "prompt": PROMPT,
        "negative_prompt": None,
        "seed": 1,
        "steps": None,
        "width": None,
        "height": None,
        "guidance": 7.5,
        "cache": "auto",
        "webhook": None,
        "webhook_events_filter": None,
    }
    canonical = json.dumps(old, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(canonical.encode()).hexdigest()

    def fingerprint(**body: object) -> str:
        return GenerationCreate.model_validate({"prompt": PROMPT, "seed": 1, **body}).fingerprint()

    assert fingerprint() == fingerprint(kind="image") == expected
    assert fingerprint(kind="video") != expected
    assert fingerprint(kind="video", frames=8) not in (expected, fingerprint(kind="video"))


def test_a_video_job_is_idempotent_on_its_key_and_body(client: TestClient, tenant: TenantCredentials) -> None:
    body = {"kind": "video", "frames": 8}
    first = post(client, tenant, body, **{"Idempotency-Key": "clip-1"})
    again = post(client, tenant, body, **{"Idempotency-Key": "clip-1"})
    assert (first.status_code, again.status_code) == (202, 200) and again.json() == first.json()
    other = post(client, tenant, {**body, "frames": 9}, **{"Idempotency-Key": "clip-1"})
    assert other.status_code == 422 and other.json()["errors"][0]["field"] == "Idempotency-Key"


def test_a_finished_video_job_links_its_video_and_reports_its_hit(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    job_id = post(client, tenant, {"kind": "video", "frames": 8}).json()["id"]
    set_job(job_id, status="succeeded", route="hit", k=10, video_hit="whole")
    job = client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()
    assert job["output"] == {"video": f"http://testserver/v1/generations/{job_id}/video", "format": "webp"}
    assert (job["metrics"]["route"], job["metrics"]["video_hit"], job["metrics"]["background_entry"]) == (
        "hit",
        "whole",
        None,
    )
    listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
    assert [(item["id"], item["kind"]) for item in listed] == [(job_id, "video")]
