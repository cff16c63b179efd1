"""The quality guard end to end: with the guard on and every hit audited, a hit served on the small
pool is generated afresh on the large pool once it is idle, both images are judged by the lab judge,
and the audit is one row; the tenant sees one job per request, and the pass reads the audit.

A stack of its own (the API, admit, large and small workers on the quality lab's models), on a
database and a Redis database of its own: the session stack runs with the guard off."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import pytest
from sqlalchemy import func, select

from core.settings import Settings
from core.vocabulary import Role
from db.blobs.factory import blob_store_from_settings
from db.codec.latent import decode_latent
from db.engine import session_scope
from db.models import Job, QualityAudit
from jobs.passes.quality_guard import run_guard
from lab.models import ensure_lab_models, load_judge
from tests.conftest import fresh_database
from tests.e2e.conftest import Stack, free_port, make_tenant
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

PROMPT = "a big red square on the left on a plain white background"  # a lab scene: the judge reads it
ROLES = (Role.ADMIT, Role.LARGE, Role.SMALL)
T = TypeVar("T")


def _own_redis(redis_url: str) -> str:
    """A Redis database no worker listens on (other test runs' stacks may share this Redis): the first
    quiet one after the session's stack's."""
    from celery import Celery

    base, number = redis_url.rsplit("/", 1)
    for offset in range(9, 24):
        candidate = f"{base}/{1 + (int(number) + offset) % 15}"
        app = Celery(broker=candidate)
        try:
            if not app.control.ping(timeout=1.0):
                return candidate
        finally:
            app.close()
    raise AssertionError("every Redis database has workers on it")


@pytest.fixture(scope="module")
def guard_stack(
    service_settings: Settings, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with fresh_database(service_settings) as db_settings:
        ensure_lab_models(db_settings)
        broker = _own_redis(redis_url)
        blobs = tmp_path_factory.mktemp("guard-blobs")
        overrides = {
            "REPRISE_DATABASE_URL": db_settings.sqlalchemy_url,
            "REPRISE_REDIS_URL": broker,
            "REPRISE_DATA_DIR": str(db_settings.data_dir.resolve()),
            "REPRISE_BLOB_DIR": str(blobs),
            "REPRISE_STEPS": "10",
            "REPRISE_CAPTURE_STEPS": "2,4,6,8",
            "REPRISE_DEFAULT_SIZE": "64",
            "REPRISE_LARGE_SERVES_HITS": "false",
            "REPRISE_PREDICTOR_ENABLED": "false",
            "REPRISE_LOOKUP_MODE": "text",  # NIRVANA's text lookups, as the session stack (tests/conftest.py)
            "REPRISE_QUALITY_GUARD": "true",
            "REPRISE_QUALITY_AUDIT_FRACTION": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
        }
        settings = db_settings.model_copy(
            update={
                "redis_url": broker,
                "steps": 10,
                "capture_steps": [2, 4, 6, 8],
                "default_size": 64,
                "quality_guard": True,
                "quality_audit_fraction": 1.0,
                "large_serves_hits": False,
                "blob_dir": blobs,
            }
        )
        port = free_port()
        stack = Stack(
            settings=settings,
            base_url=f"http://127.0.0.1:{port}",
            env={**os.environ, **overrides},
            logs=tmp_path_factory.mktemp("guard-logs"),
        )
        with stack.serving(port, ROLES):
            yield stack


def _submit(stack: Stack, headers: dict[str, str], seed: int) -> uuid.UUID:
    response = httpx.post(
        f"{stack.base_url}/v1/generations", json={"prompt": PROMPT, "seed": seed}, headers=headers, timeout=10
    )
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


def _until(stack: Stack, probe: Callable[[], T | None], what: str, timeout_s: float = 180.0) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        stack._check_alive()
        time.sleep(0.3)
    raise AssertionError(f"{what} not within {timeout_s}s; logs in {stack.logs}")


def _done(stack: Stack, job_id: uuid.UUID) -> Job | None:
    with session_scope(stack.settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
    return job if job.status in ("succeeded", "failed", "canceled") else None


def _audit(stack: Stack, job_id: uuid.UUID) -> QualityAudit | None:
    with session_scope(stack.settings) as session:
        row = session.scalars(select(QualityAudit).where(QualityAudit.job_id == job_id)).one_or_none()
        if row is not None:
            session.expunge(row)
        return row


def _judged(stack: Stack, job: Job) -> float:
    """The lab judge's score of the job's stored final latent, decoded by its family's VAE here."""
    assert job.final_latent_key is not None
    stored = decode_latent(blob_store_from_settings(stack.settings).get(job.final_latent_key))
    runtime = WorkerContext(stack.settings, Role.SMALL).runtime()
    image = runtime.decode(stored.array, family=stored.family).image
    score = load_judge(stack.settings).score([image], [PROMPT])[0]
    assert score is not None
    return float(score)


def test_a_hit_is_audited_against_a_fresh_generation_judged_by_the_lab_judge(guard_stack: Stack) -> None:
    stack = guard_stack
    tenant = make_tenant(stack.settings, f"guard-{uuid.uuid4().hex[:8]}")
    miss_id = _submit(stack, tenant.auth_headers, 1)
    miss = _until(stack, lambda: _done(stack, miss_id), "the miss")
    assert miss.status == "succeeded" and miss.route == "miss"
    hit_id = _submit(stack, tenant.auth_headers, 2)  # the same prompt, another seed: a hit on its entry
    hit = _until(stack, lambda: _done(stack, hit_id), "the hit")
    assert hit.status == "succeeded" and hit.route == "hit" and hit.k is not None
    assert (
        hit.quality is None and hit.final_latent_key is not None
    )  # its latent alone, never decoded to judge

    audit = _until(stack, lambda: _audit(stack, hit_id), "the audit")
    assert hit.similarity is not None and audit.similarity == pytest.approx(hit.similarity)
    assert (audit.k, audit.steps) == (hit.k, 10)
    # The audit judged the hit's stored image itself: the judge's reading of that latent, decoded.
    assert audit.scorer == "lab-judge" and audit.hit_score == pytest.approx(_judged(stack, hit))
    assert 0.0 <= audit.fresh_score <= 1.0 and audit.drop == pytest.approx(
        audit.fresh_score - audit.hit_score
    )
    with session_scope(stack.settings) as session:  # the audit made no job of its own
        assert (
            session.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == tenant.tenant_id))
            == 2
        )
    # The pass reads it: one audit is below the minimum sample, so the table holds.
    decision = run_guard(stack.settings)
    assert decision is not None and not decision.changed
