"""The GPU task bodies against the real database and blob store: a miss generates and fills the cache,
a hit runs T-k steps from it, and a redelivered task changes nothing (every effect once per job)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import select

from core.settings import Settings
from core.vocabulary import JobStatus, Role, WebhookEvent
from db.engine import session_scope
from db.models import CacheEntry, CacheState, Job
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.generation import generate_job, reuse_job
from workers.kinds.image.cache_fill import ENTRY_NAMESPACE

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"
HOOK = {"webhook_url": "https://hooks.example.com/r", "webhook_events_filter": ["start", "completed"]}


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def _entries_of(settings: Settings, job_id: uuid.UUID) -> list[CacheEntry]:
    with session_scope(settings) as session:
        found = list(session.scalars(select(CacheEntry).where(CacheEntry.source_job_id == job_id)))
        session.expunge_all()
        return found


def _states(settings: Settings, entry_id: uuid.UUID) -> list[int]:
    with session_scope(settings) as session:
        return sorted(session.scalars(select(CacheState.k).where(CacheState.entry_id == entry_id)))


def _miss(settings: Settings, context_for: Callable[[Role], WorkerContext]) -> tuple[uuid.UUID, uuid.UUID]:
    tenant = make_tenant(settings)
    job_id = make_job(settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss", **HOOK)
    generate_job(context_for(Role.LARGE), job_id)
    return tenant, job_id


def test_a_miss_runs_t_steps_stores_its_latents_and_caches_every_captured_state(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    _, job_id = _miss(task_settings, context_for)
    job = _job(task_settings, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 1
    assert sum(job.denoiser_evals.values()) == task_settings.steps
    assert job.final_latent_key is not None
    assert context_for(Role.LARGE).blobs.get(job.final_latent_key)  # the latent is stored, not an image
    [entry] = _entries_of(task_settings, job_id)
    assert entry.id == uuid.uuid5(ENTRY_NAMESPACE, str(job_id))
    assert _states(task_settings, entry.id) == sorted(task_settings.capture_steps)
    events = [sent.args[1] for sent in dispatcher.of(TaskName.DELIVER_WEBHOOK)]
    assert events == [WebhookEvent.STARTED.value, WebhookEvent.COMPLETED.value]


def test_a_redelivered_miss_changes_nothing(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    _, job_id = _miss(task_settings, context_for)
    first = _job(task_settings, job_id)
    sent = list(dispatcher.sent)
    generate_job(context_for(Role.LARGE), job_id)  # the broker hands the message out again
    again = _job(task_settings, job_id)
    assert (again.status, again.attempts, again.finished_at) == (
        first.status,
        first.attempts,
        first.finished_at,
    )
    assert len(_entries_of(task_settings, job_id)) == 1
    assert dispatcher.sent == sent  # no second webhook event


def test_a_hit_resumes_the_cached_state_on_the_small_model_for_t_minus_k_steps(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant, source_job = _miss(task_settings, context_for)
    [entry] = _entries_of(task_settings, source_job)
    k = 20
    job_id = make_job(
        task_settings, tenant, PROMPT, route="hit", k=k, source_entry_id=entry.id, admission_outcome="hit"
    )
    uses_before = _uses(task_settings, entry.id, k)
    reuse_job(context_for(Role.SMALL), job_id)
    job = _job(task_settings, job_id)
    assert job.status == JobStatus.SUCCEEDED
    assert sum(job.denoiser_evals.values()) == task_settings.steps - k
    assert job.models_used != _job(task_settings, source_job).models_used  # the small model ran it
    assert _uses(task_settings, entry.id, k) == uses_before + 1
    reuse_job(context_for(Role.SMALL), job_id)  # redelivered after it ended: nothing runs or counts again
    assert _uses(task_settings, entry.id, k) == uses_before + 1


def _uses(settings: Settings, entry_id: uuid.UUID, k: int) -> int:
    with session_scope(settings) as session:
        return (
            session.scalar(
                select(CacheState.access_count).where(CacheState.entry_id == entry_id, CacheState.k == k)
            )
            or 0
        )
