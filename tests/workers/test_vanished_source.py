"""A hit whose cache entry was evicted after admission runs as a miss (NIRVANA 5.4 holes)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis

from core.settings import Settings
from core.vocabulary import JobStatus, Role, Route
from db.engine import session_scope
from db.models import CacheEntry, Job, Tenant
from jobs.celery_app import get_celery_app
from jobs.dispatch import route_task
from jobs.queues import Queue, queue_depth
from tests.support.dispatch import RecordingDispatcher
from workers.context import WorkerContext
from workers.generation import reuse_job

pytestmark = pytest.mark.integration


def _hit_job(settings: Settings, *, source_entry_id: uuid.UUID | None, priority: str = "normal") -> uuid.UUID:
    with session_scope(settings) as session:
        tenant = Tenant(name=f"vanish-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_AAAA")
        session.add(tenant)
        session.flush()
        job = Job(
            tenant_id=tenant.id,
            prompt="a fox in the snow",
            seed=1,
            steps=50,
            width=64,
            height=64,
            guidance=7.5,
            route="hit",
            k=20,
            source_entry_id=source_entry_id,
            admission_outcome="hit",
            priority=priority,
        )
        session.add(job)
        session.flush()
        return job.id


@pytest.mark.parametrize("evicted", ["entry", "state"])
def test_a_hit_whose_source_was_evicted_is_rerouted_to_the_large_pool(
    db_settings: Settings, tmp_path: Path, evicted: str
) -> None:
    settings = db_settings.model_copy(update={"blob_dir": tmp_path})
    with session_scope(settings) as session:
        entry = CacheEntry(
            scope="shared", model_family="tiny-sd", prompt="a fox", text_embedding=[0.1] * 384, bytes=10
        )
        session.add(entry)
        session.flush()
        entry_id = entry.id
    job_id = _hit_job(settings, source_entry_id=entry_id)
    if evicted == "entry":  # the whole entry left after admission chose it (the job's FK is nulled)
        with session_scope(settings) as session:
            session.delete(session.get_one(CacheEntry, entry_id))
    # else: the entry lives but holds no state at k = 20 (evicted one by one): SourceVanished

    broker = redis.Redis.from_url(get_celery_app().conf.broker_url)
    before = queue_depth(broker, Queue.CACHE_MISS) or 0
    reuse_job(WorkerContext(settings, Role.SMALL), job_id)

    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        assert (job.status, job.route, job.k, job.source_entry_id) == (JobStatus.STARTING, "miss", None, None)
        assert job.attempts == 0 and job.lease_owner is None  # the fallback costs no attempt
    assert queue_depth(broker, Queue.CACHE_MISS) == before + 1  # sent to the large pool


@pytest.mark.parametrize(("priority", "step"), [("high", 0), ("low", 6)])
def test_a_rerouted_hit_keeps_its_priority(
    db_settings: Settings, tmp_path: Path, priority: str, step: int
) -> None:
    """The miss it becomes is sent at its job's broker step (jobs.priority), not at normal's."""
    settings = db_settings.model_copy(update={"blob_dir": tmp_path})
    job_id = _hit_job(settings, source_entry_id=None, priority=priority)  # a hit without a source
    dispatcher = RecordingDispatcher()
    reuse_job(WorkerContext(settings, Role.SMALL, dispatcher=dispatcher), job_id)
    (sent,) = dispatcher.of(route_task(Route.MISS, settings))
    assert sent.args == (str(job_id),) and sent.priority == step
