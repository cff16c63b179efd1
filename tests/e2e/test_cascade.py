"""DiffServe's cascade through the live stack (DiffServe 3.2, 3.3): light first, the discriminator's verdict,
escalations to the heavy model, each job completed exactly once, one webhook per event.

The stack runs REPRISE_ALLOCATOR=diffserve on the quality lab's models (light lab:small, heavy
lab:large) with a discriminator trained here on a few dozen generations and stored like the
service's. Wave one runs under the configured threshold 0: every light image is kept. Wave two
repeats the same prompts and seeds under a decision whose threshold falls between their scores:
the same images score the same, so those below it escalate and the others do not. Then the allocator
runs once on that traffic and records its MILP decision.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select

from bench.quality.cascade import CascadeOptions, lab_ground_truth, train_cascade
from core.settings import Settings
from core.vocabulary import Allocator, Role
from db import cascade as cascade_db
from db.engine import session_scope
from db.models import CascadeDecision, Job
from db.tenants import TenantCredentials
from jobs.celery_app import make_celery_app
from jobs.pools.actuator import PoolActuator
from jobs.pools.diffserve import allocate_cascade
from lab.models import ensure_lab_models
from tests.conftest import fresh_database
from tests.e2e.conftest import Stack, WebhookReceiver, free_port, make_tenant
from workers.cascade import THRESHOLD_TTL_S

pytestmark = pytest.mark.integration

PROMPTS = lab_ground_truth(6, seed=2026)[0]  # captions of the lab's world
ROLES = (Role.ADMIT, Role.SMALL, Role.LARGE, Role.IO)
STEPS = 10


@pytest.fixture(scope="module")
def cascade_db_settings(service_settings: Settings) -> Iterator[Settings]:
    with fresh_database(service_settings) as settings:
        yield settings


@pytest.fixture(scope="module")
def cascade_stack(
    cascade_db_settings: Settings,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_receiver: WebhookReceiver,
) -> Iterator[Stack]:
    base, number = redis_url.rsplit("/", 1)
    broker = f"{base}/{1 + (int(number) + 3) % 15}"
    settings = cascade_db_settings.model_copy(
        update={
            "redis_url": broker,
            "steps": STEPS,
            "capture_steps": [2, 4, 6, 8],
            "default_size": 64,
            "allocator": Allocator.DIFFSERVE,
            "cascade_threshold": 0.0,
        }
    )
    ensure_lab_models(settings)
    _train_discriminator(settings)
    overrides = {
        "REPRISE_DATABASE_URL": settings.sqlalchemy_url,
        "REPRISE_REDIS_URL": broker,
        "REPRISE_DATA_DIR": str(settings.data_dir.resolve()),
        "REPRISE_BLOB_DIR": str(tmp_path_factory.mktemp("cascade-blobs")),
        "REPRISE_STEPS": str(STEPS),
        "REPRISE_CAPTURE_STEPS": "2,4,6,8",
        "REPRISE_DEFAULT_SIZE": "64",
        "REPRISE_ALLOCATOR": "diffserve",
        "REPRISE_CASCADE_THRESHOLD": "0",
        "REPRISE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
        "REPRISE_PREDICTOR_ENABLED": "false",
        "REPRISE_LOOKUP_MODE": "text",  # NIRVANA's text lookups, as the session stack (tests/conftest.py)
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    port = free_port()
    stack = Stack(
        settings=settings,
        base_url=f"http://127.0.0.1:{port}",
        env={**os.environ, **overrides},
        logs=tmp_path_factory.mktemp("cascade-logs"),
    )
    try:
        stack.start("api", ["api", "--port", str(port)])
        for role in ROLES:
            stack.start(
                f"worker-{role.value}", ["worker", "--role", role.value, "--name", f"{role.value}-e2e@%h"]
            )
        stack.wait_api()
        stack.wait_workers(ROLES)
        yield stack
    finally:
        stack.stop()


def _train_discriminator(settings: Settings) -> None:
    """The service's own training (`reprise cascade train`) at a test's size, stored for the workers."""
    options = CascadeOptions(light="lab:small", heavy="lab:large", prompts=24, steps=STEPS)
    discriminator, report = train_cascade(settings, options, log=lambda _: None)
    with session_scope(settings) as session:
        cascade_db.save_discriminator(
            session,
            light_model="lab:small",
            heavy_model="lab:large",
            features=report["features"],
            accuracy=report["accuracy"],
            report=report,
            model=discriminator.to_bytes(),
        )


def _submit(
    stack: Stack, tenant: TenantCredentials, receiver: WebhookReceiver, prompt: str, seed: int
) -> str:
    body = {"prompt": prompt, "seed": seed, "cache": "off", "webhook": receiver.url}
    response = httpx.post(
        f"{stack.base_url}/v1/generations", json=body, headers=tenant.auth_headers, timeout=10
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _wave(stack: Stack, tenant: TenantCredentials, receiver: WebhookReceiver) -> list[Job]:
    ids = [_submit(stack, tenant, receiver, prompt, seed) for seed, prompt in enumerate(PROMPTS)]
    for job_id in ids:
        receiver.wait_for(job_id, "generation.completed", timeout_s=240)
    with session_scope(stack.settings) as session:
        jobs = {
            str(job.id): job
            for job in session.scalars(select(Job).where(Job.id.in_([uuid.UUID(i) for i in ids])))
        }
        session.expunge_all()
    return [jobs[job_id] for job_id in ids]


def _events(receiver: WebhookReceiver, jobs: list[Job]) -> Counter[tuple[str, str]]:
    wanted = {str(job.id) for job in jobs}
    with receiver.lock:
        payloads = [item.json() for item in receiver.received]
    return Counter((p["data"]["id"], p["type"]) for p in payloads if p["data"]["id"] in wanted)


def test_light_first_then_escalated_below_the_threshold_each_exactly_once(
    cascade_stack: Stack, webhook_receiver: WebhookReceiver
) -> None:
    stack = cascade_stack
    tenant = make_tenant(stack.settings, "cascade")
    first = _wave(stack, tenant, webhook_receiver)
    for job in first:  # threshold 0: the light model answers everything
        assert job.status == "succeeded", job.error
        assert job.cascade is not None and job.cascade["escalated"] is False
        assert job.cascade["score"] is not None and job.cascade["threshold"] == 0.0
        assert len(job.models_used) == 1 and job.route == "miss"
    scores = sorted(job.cascade["score"] for job in first if job.cascade)
    assert scores[0] < scores[-1], "the discriminator gave every light image the same score"
    threshold = (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2
    with session_scope(stack.settings) as session:  # what the allocator records, and the light workers read
        cascade_db.add_decision(session, _decision(threshold))
    time.sleep(THRESHOLD_TTL_S + 1.0)

    second = _wave(stack, tenant, webhook_receiver)
    escalated = 0
    for before, job in zip(first, second, strict=True):
        assert job.status == "succeeded", job.error
        assert job.cascade is not None and before.cascade is not None
        # Same prompt and seed; batched with other jobs, a light image moves in its last bits only
        # (BATCH_ATOL, workers/runtime/batching.py), and its score a few millionths.
        assert job.cascade["score"] == pytest.approx(before.cascade["score"], abs=1e-4)
        should = before.cascade["score"] < threshold
        assert job.cascade["escalated"] is should
        assert job.cascade["threshold"] == pytest.approx(threshold)
        if should:
            escalated += 1
            assert job.models_used[0] == before.models_used[0] and len(job.models_used) == 2
            assert set(job.denoiser_evals) == set(job.models_used)
            assert job.route == "heavy" and job.attempts == 1
        else:
            assert job.models_used == before.models_used and job.route == "miss"
    assert 0 < escalated < len(second)
    for (_, event), count in _events(webhook_receiver, first + second).items():
        assert count == 1, f"{event} delivered {count} times"
    assert len(_events(webhook_receiver, first + second)) == 2 * len(first + second)  # started + completed

    view = httpx.get(
        f"{stack.base_url}/v1/generations/{second[0].id}", headers=tenant.auth_headers, timeout=10
    )
    metrics, stage = view.json()["metrics"]["cascade"], second[0].cascade
    assert stage is not None and metrics["escalated"] is stage["escalated"] and metrics["light_model"]
    _check_stats_and_allocator(stack, escalated)


def _decision(threshold: float) -> CascadeDecision:
    now = datetime.now(UTC)
    return CascadeDecision(
        period_start=now,
        period_seconds=60,
        inputs={"source": "e2e test"},
        solution={"threshold": threshold},
        threshold=threshold,
        feasible=True,
        objective=threshold,
        solve_ms=0.0,
        target_light=1,
        target_heavy=1,
        applied_light=1,
        applied_heavy=1,
        switches=[],
    )


def _check_stats_and_allocator(stack: Stack, escalated: int) -> None:
    admin = make_tenant(stack.settings, "cascade-admin", admin=True)
    stats = httpx.get(f"{stack.base_url}/v1/stats", headers=admin.auth_headers, timeout=10).json()
    cascade = stats["cascade"]
    assert cascade["allocator"] == "diffserve" and cascade["light_stages"] == 2 * len(PROMPTS)
    assert cascade["escalated"] == escalated and cascade["discriminator"]["features"] == "lab"

    now = datetime.now(UTC)
    actuator = PoolActuator(make_celery_app(stack.settings))
    decision = allocate_cascade(stack.settings, actuator, window=(now - timedelta(minutes=10), now))
    assert decision is not None
    assert decision.solution["light_workers"] + decision.solution["heavy_workers"] == 2
    assert decision.target_heavy >= 1 and decision.solve_ms > 0
    assert decision.inputs["demand_estimate"]["cascade_rps"] > 0
    assert decision.inputs["curve"]["source"].startswith("profiled: discriminator")  # < 50 scores measured
    metrics = httpx.get(f"{stack.base_url}/metrics", timeout=10).text
    assert f"reprise_cascade_threshold {decision.threshold}" in metrics
