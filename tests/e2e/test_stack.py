"""End to end through HTTP: real Postgres, Redis, Celery workers on the quality lab's models, webhooks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from core.vocabulary import Role
from db.engine import session_scope
from db.models import CacheEntry
from db.tenants import TenantCredentials
from jobs.admission import scale_k
from jobs.dispatch import CeleryDispatcher
from jobs.passes.reconcile import reconcile
from jobs.policies.k_selection import choose_k, configured_table
from jobs.webhooks import verify
from tests.e2e.conftest import Stack, WebhookReceiver, make_tenant

pytestmark = pytest.mark.integration

TERMINAL = {"succeeded", "failed", "canceled"}


def submit(stack: Stack, tenant: TenantCredentials, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = httpx.post(
        f"{stack.base_url}/v1/generations", json=body, headers={**tenant.auth_headers, **headers}, timeout=10
    )
    assert response.status_code in (200, 202), response.text
    job: dict[str, Any] = response.json()
    return job


def get(stack: Stack, tenant: TenantCredentials, job_id: str) -> httpx.Response:
    return httpx.get(f"{stack.base_url}/v1/generations/{job_id}", headers=tenant.auth_headers, timeout=10)


def wait_status(
    stack: Stack, tenant: TenantCredentials, job_id: str, statuses: set[str], timeout_s: float = 120.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = get(stack, tenant, job_id).json()
        if job["status"] in statuses:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {statuses}; last: {job}")


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"e2e-{uuid.uuid4().hex[:8]}")


def test_near_duplicate_is_served_from_the_cache_by_the_small_pool(
    stack: Stack, tenant: TenantCredentials, webhook_receiver: WebhookReceiver
) -> None:
    prompt = "a big red square on the left on a plain white background"
    first = submit(
        stack, tenant, {"prompt": prompt, "seed": 7, "webhook": webhook_receiver.url, "decode": "eager"}
    )
    done = wait_status(stack, tenant, first["id"], TERMINAL)
    assert done["status"] == "succeeded", done
    assert done["metrics"]["route"] == "miss"
    assert done["metrics"]["denoiser_evaluations"] == {"lab-large": 10}
    # Decoded at once (an eager request), its image was judged by the lab's judge on the way.
    assert 0.0 <= done["metrics"]["quality"] <= 1.0 and done["metrics"]["vae_decodes"] == 1

    second = submit(stack, tenant, {"prompt": prompt.replace("big", "large"), "seed": 8})
    hit = wait_status(stack, tenant, second["id"], TERMINAL)
    assert hit["status"] == "succeeded", hit
    metrics = hit["metrics"]
    assert metrics["route"] == "hit" and metrics["source_entry"] is not None
    # The k the configured table (auto: the one profiled on the lab's models) gives this similarity,
    # scaled from 50 to 10 steps, over the stored states.
    profiled = choose_k(metrics["similarity"], configured_table(stack.settings), None)
    assert profiled is not None
    scaled = scale_k(profiled, 10)
    assert scaled is not None
    expected_k = max(k for k in (2, 4, 6, 8) if k <= scaled)  # only even states are stored
    assert metrics["k"] == expected_k
    assert metrics["models"] == ["lab-small"]
    assert metrics["denoiser_evaluations"] == {"lab-small": 10 - expected_k}
    # Its latent alone was stored (LatentBox's decode on read): nothing decoded it only to judge it.
    assert metrics["quality"] is None and metrics["vae_decodes"] == 0
    assert metrics["stages_ms"]["denoise"] > 0 and "vae_decode" not in metrics["stages_ms"]

    # The image is decoded from the stored latent on the decode pool, in each format asked for.
    for fmt, magic in (("png", b"\x89PNG"), ("jpeg", b"\xff\xd8"), ("webp", b"RIFF")):
        image = httpx.get(f"{hit['urls']['image']}?format={fmt}", headers=tenant.auth_headers, timeout=60)
        assert image.status_code == 200, image.text
        assert image.content.startswith(magic)

    # Webhooks: started and completed, each validly signed with the tenant's secret.
    for event in ("generation.started", "generation.completed"):
        delivery = webhook_receiver.wait_for(first["id"], event)
        verify(tenant.webhook_secret, delivery.headers, delivery.body)
    completed = webhook_receiver.wait_for(first["id"], "generation.completed").json()
    assert completed["data"]["status"] == "succeeded"


def test_idempotency_key_returns_the_first_job(stack: Stack, tenant: TenantCredentials) -> None:
    body = {"prompt": "a paper boat on a puddle", "seed": 3}
    key = uuid.uuid4().hex
    first = submit(stack, tenant, body, **{"Idempotency-Key": key})
    again = submit(stack, tenant, body, **{"Idempotency-Key": key})
    assert again["id"] == first["id"]
    other = httpx.post(
        f"{stack.base_url}/v1/generations",
        json={**body, "seed": 4},
        headers={**tenant.auth_headers, "Idempotency-Key": key},
        timeout=10,
    )
    assert other.status_code == 422 and other.headers["content-type"].startswith("application/problem+json")
    assert wait_status(stack, tenant, first["id"], TERMINAL)["status"] == "succeeded"


def test_cancel_a_running_job_stops_it(stack: Stack, tenant: TenantCredentials) -> None:
    # A long run (no cache, T = 150 at 128px) so that the cancel lands while it denoises.
    job = submit(
        stack, tenant, {"prompt": "a slow clock", "steps": 150, "width": 128, "height": 128, "cache": "off"}
    )
    wait_status(stack, tenant, job["id"], {"processing"} | TERMINAL)
    response = httpx.post(job["urls"]["cancel"], headers=tenant.auth_headers, timeout=10)
    assert response.status_code == 200
    ended = wait_status(stack, tenant, job["id"], TERMINAL)
    assert ended["status"] == "canceled" and ended["started_at"] is not None
    assert ended["output"] is None


def test_another_tenant_sees_404(stack: Stack, tenant: TenantCredentials) -> None:
    job = submit(stack, tenant, {"prompt": "a private garden"})
    intruder = make_tenant(stack.settings, f"intruder-{uuid.uuid4().hex[:8]}")
    for url in (job["urls"]["self"], job["urls"]["image"]):
        response = httpx.get(url, headers=intruder.auth_headers, timeout=10)
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("application/problem+json")
    assert httpx.post(job["urls"]["cancel"], headers=intruder.auth_headers, timeout=10).status_code == 404


def test_bad_input_is_a_4xx_problem(stack: Stack, tenant: TenantCredentials) -> None:
    for body in ({"prompt": ""}, {"prompt": "x", "width": 65}, {"prompt": "x", "steps": 0}, {"prompt": 3}):
        response = httpx.post(f"{stack.base_url}/v1/generations", json=body, headers=tenant.auth_headers)
        assert response.status_code == 422, body
        assert response.headers["content-type"].startswith("application/problem+json")


def test_a_worker_killed_mid_task_loses_no_job(stack: Stack, tenant: TenantCredentials) -> None:
    job = submit(stack, tenant, {"prompt": "a storm over the sea", "steps": 60, "width": 128, "height": 128})
    running = wait_status(stack, tenant, job["id"], {"processing"} | TERMINAL)
    assert running["status"] == "processing", "the job ended before the worker could be killed"
    stack.kill(f"worker-{Role.LARGE.value}")
    killed_at = time.monotonic()
    stack.start_worker(Role.LARGE)
    # The unacked message would come back only after the 900 s visibility timeout: the job returns
    # through its lapsed 6 s lease and the reconciler (the beat's pass, called here every second).
    dispatcher = CeleryDispatcher.for_settings(stack.settings)
    done: dict[str, Any] = {}
    while time.monotonic() - killed_at < 300 and done.get("status") not in TERMINAL:
        reconcile(stack.settings, dispatcher)
        time.sleep(1.0)
        done = get(stack, tenant, job["id"]).json()
    # Within 300 s, so not by the 900 s redelivery: lease (6 s) + reconcile + a new worker's start +
    # the run, which take from 20 s to a minute on two loaded cores.
    assert done["status"] == "succeeded", done
    with session_scope(stack.settings) as session:
        from db.models import Job

        row = session.get(Job, uuid.UUID(job["id"]))
        assert row is not None and row.attempts == 2
        entries = session.scalar(
            select(func.count()).select_from(CacheEntry).where(CacheEntry.source_job_id == row.id)
        )
    assert entries == 1  # generated to completion once, cached once


def test_ping_worker_is_a_healthcheck_over_the_broker(stack: Stack) -> None:
    def ping(*args: str) -> int:
        argv = [sys.executable, "-m", "reprise", "ping-worker", "--timeout", "3", *args]
        return subprocess.run(argv, env=stack.env, capture_output=True, timeout=60, check=False).returncode

    assert ping() == 0  # the stack's workers run on this host
    assert ping("--name", f"{Role.IO.value}-e2e@{socket.gethostname()}") == 0
    assert ping("--name", "nobody@nowhere") == 1
