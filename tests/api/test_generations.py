"""Create, read, list and cancel generations through the HTTP API, against Postgres and Redis."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis
from fastapi.testclient import TestClient

from core.settings import Settings
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials
from jobs.queues import Queue, TaskName, queue_depth
from tests.support.queued import queued_messages

pytestmark = pytest.mark.integration

PROMPT = "a red bicycle leaning on a brick wall"


def submit(client: TestClient, who: TenantCredentials, **body: object) -> dict[str, object]:
    response = client.post("/v1/generations", json={"prompt": PROMPT, **body}, headers=who.auth_headers)
    assert response.status_code == 202, response.text
    result: dict[str, object] = response.json()
    return result


def test_create_answers_202_with_the_job_and_queues_its_admission(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis
) -> None:
    response = client.post(
        "/v1/generations",
        json={"prompt": PROMPT, "seed": 7, "steps": 20, "width": 256, "height": 384, "cache": "off"},
        headers=tenant.auth_headers,
    )
    assert response.status_code == 202
    job = response.json()
    assert job["status"] == "starting"
    assert job["input"] == {
        "prompt": PROMPT,
        "negative_prompt": None,
        "seed": 7,
        "steps": 20,
        "width": 256,
        "height": 384,
        "guidance": 7.5,
        "cache": "off",
        "decode": "lazy",
        "webhook": None,
        "webhook_events_filter": ["completed", "start"],
        "priority": "normal",
        "deadline_s": None,
        "on_deadline": "best_effort",
    }
    assert job["output"] is None and job["error"] is None
    base = f"http://testserver/v1/generations/{job['id']}"
    assert job["urls"] == {"self": base, "cancel": f"{base}/cancel", "image": f"{base}/image"}
    assert response.headers["location"] == base
    # The admission task sits in the admit queue, naming the job.
    assert queue_depth(broker, Queue.ADMIT) == 1
    (message,) = queued_messages(broker, Queue.ADMIT.value)
    assert message["headers"]["task"] == TaskName.ADMIT.value
    assert message["headers"]["argsrepr"] == repr([job["id"]])


def test_defaults_fill_steps_size_and_a_random_seed(
    client: TestClient, tenant: TenantCredentials, db_settings: Settings
) -> None:
    first, second = submit(client, tenant), submit(client, tenant)
    inputs = [job["input"] for job in (first, second)]
    size = db_settings.effective_default_size  # 64 with the tiny models, 512 with configured ones
    assert all(isinstance(i, dict) and i["steps"] == 50 and i["width"] == i["height"] == size for i in inputs)
    seeds = {i["seed"] for i in inputs if isinstance(i, dict)}
    assert len(seeds) == 2  # random per request (a collision has odds 1 in 2^32)


def test_get_returns_what_the_workers_wrote(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    job_id = str(submit(client, tenant)["id"])
    created = datetime.now(UTC) - timedelta(seconds=10)
    set_job(
        job_id,
        status="succeeded",
        route="hit",
        admission_outcome="hit",
        similarity=0.91,
        k=20,
        models_used=["tiny-small"],
        denoiser_evals={"tiny-small": 30},
        admission_ms={"embed": 4.0, "lookup": 2.5, "total": 7.0},
        stages_ms={"store": 3.0, "claim": 1.5, "denoise": 2500.0, "complete": 2.0},
        created_at=created,
        started_at=created + timedelta(seconds=2),
        finished_at=created + timedelta(seconds=5),
    )
    job = client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()
    assert job["status"] == "succeeded"
    assert job["output"] == {
        "image": f"http://testserver/v1/generations/{job_id}/image?format=png",
        "format": "png",
    }
    assert job["metrics"] == {
        "route": "hit",
        "admission": "hit",
        "similarity": 0.91,
        "k": 20,
        "source_entry": None,
        "models": ["tiny-small"],
        "denoiser_evaluations": {"tiny-small": 30},
        "vae_decodes": 0,
        "quality": None,
        "cascade": None,
        "admission_ms": {"embed": 4.0, "lookup": 2.5, "total": 7.0},
        "queue_time_s": 2.0,
        "run_time_s": 3.0,
        # Waiting is what admission did not take of the 2 s before the run; the run's stages in its order.
        "stages_ms": {
            "queue": 1993.0,
            "admission": 7.0,
            "claim": 1.5,
            "denoise": 2500.0,
            "store": 3.0,
            "complete": 2.0,
        },
    }
    order = ["queue", "admission", "claim", "denoise", "store", "complete"]
    assert list(job["metrics"]["stages_ms"]) == order
    assert job["completed_at"] is not None


def test_an_escalated_job_shows_both_stages_and_is_a_miss(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    """DiffServe's cascade (DiffServe 3.2): the light stage and the discriminator's verdict in the metrics."""
    job_id = str(submit(client, tenant)["id"])
    stage = {
        "light_model": "lab-large",
        "light_evals": {"lab-large": 4},
        "light_ms": 12.5,
        "score": 0.004,
        "threshold": 0.0106,
        "escalated": True,
        "discriminator_version": 3,
        "reason": None,
    }
    set_job(job_id, status="succeeded", route="heavy", cascade=stage, models_used=["lab-large", "lab-large"])
    metrics = client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()["metrics"]
    assert metrics["route"] == "miss"  # escalated by the cascade: still a miss of the cache
    assert metrics["cascade"] == {
        "light_model": "lab-large",
        "discriminator_score": 0.004,
        "threshold": 0.0106,
        "escalated": True,
        "discriminator_version": 3,
        "light_ms": 12.5,
    }


def test_public_base_url_prefixes_the_urls(
    make_client: Callable[..., TestClient], tenant: TenantCredentials
) -> None:
    client = make_client(public_base_url="https://api.example.com")
    job = submit(client, tenant)
    assert job["urls"] == {
        "self": f"https://api.example.com/v1/generations/{job['id']}",
        "cancel": f"https://api.example.com/v1/generations/{job['id']}/cancel",
        "image": f"https://api.example.com/v1/generations/{job['id']}/image",
    }


@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_unknown_job_is_a_404_problem(client: TestClient, tenant: TenantCredentials, job_id: str) -> None:
    response = client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["instance"] == f"/v1/generations/{job_id}"


def test_list_pages_newest_first_and_filters_by_status(
    client: TestClient, make_tenant: Callable[..., TenantCredentials], set_job: Callable[..., None]
) -> None:
    who = make_tenant()
    ids = [str(submit(client, who)["id"]) for _ in range(5)]
    set_job(ids[1], status="failed", error="boom")
    set_job(ids[3], status="failed", error="boom")

    seen: list[str] = []
    url: str | None = "/v1/generations?limit=2"
    pages = 0
    while url is not None:
        page = client.get(url, headers=who.auth_headers).json()
        seen += [job["id"] for job in page["results"]]
        url = page["next"]
        pages += 1
    assert seen == list(reversed(ids)) and pages == 3

    failed = client.get("/v1/generations?status=failed&limit=1", headers=who.auth_headers).json()
    assert [job["id"] for job in failed["results"]] == [ids[3]]
    assert "status=failed" in failed["next"]
    rest = client.get(failed["next"], headers=who.auth_headers).json()
    assert [job["id"] for job in rest["results"]] == [ids[1]] and rest["next"] is None


def test_list_refuses_a_forged_cursor(client: TestClient, tenant: TenantCredentials) -> None:
    response = client.get("/v1/generations?cursor=bm90LWEtY3Vyc29y", headers=tenant.auth_headers)
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"location": "query", "field": "cursor", "detail": response.json()["detail"]}
    ]


def test_cancel_of_a_starting_job_cancels_it_at_once_and_sends_the_completed_webhook(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis
) -> None:
    job = submit(client, tenant, webhook="http://127.0.0.1:9/hook", webhook_events_filter=["completed"])
    response = client.post(f"/v1/generations/{job['id']}/cancel", headers=tenant.auth_headers)
    assert response.status_code == 200
    canceled = response.json()
    assert canceled["status"] == "canceled" and canceled["completed_at"] is not None
    assert broker.llen(Queue.WEBHOOKS.value) == 1
    message = json.loads(broker.lindex(Queue.WEBHOOKS.value, 0))  # type: ignore[arg-type]
    assert message["headers"]["task"] == TaskName.DELIVER_WEBHOOK.value
    assert message["headers"]["argsrepr"] == repr([job["id"], "generation.completed", 1])


def test_cancel_of_a_processing_job_only_flags_it(
    client: TestClient,
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    broker: redis.Redis,
    api_settings: Settings,
) -> None:
    job_id = str(submit(client, tenant, webhook="http://127.0.0.1:9/hook")["id"])
    set_job(job_id, status="processing")
    response = client.post(f"/v1/generations/{job_id}/cancel", headers=tenant.auth_headers)
    assert response.json()["status"] == "processing"  # the worker stops it and reports
    assert broker.llen(Queue.WEBHOOKS.value) == 0
    with session_scope(api_settings) as session:
        row = session.get(Job, uuid.UUID(job_id))
        assert row is not None and row.cancel_requested and row.status == "processing"


def test_cancel_of_a_finished_job_changes_nothing(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    job_id = str(submit(client, tenant)["id"])
    set_job(job_id, status="succeeded")
    response = client.post(f"/v1/generations/{job_id}/cancel", headers=tenant.auth_headers)
    assert response.status_code == 200 and response.json()["status"] == "succeeded"


def test_a_broker_outage_keeps_the_job_starting_in_postgres(
    make_client: Callable[..., TestClient], tenant: TenantCredentials
) -> None:
    client = make_client(redis_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    response = client.post("/v1/generations", json={"prompt": PROMPT}, headers=tenant.auth_headers)
    assert response.status_code == 202
    job_id = response.json()["id"]
    assert client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()["status"] == "starting"
