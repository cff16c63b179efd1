"""The admit task body against the real database: it decides, records once, and routes through the
dispatcher (recorded, so the decision is read off what would have gone on the broker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from core import logs
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, JobStatus, Role, Route
from db import cache
from db.engine import session_scope
from db.models import Job
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.admission import admit
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse on a cliff at dusk, oil painting"


def _cache_entry(settings: Settings, context: WorkerContext, scope: str, prompt: str) -> uuid.UUID:
    """An entry for `prompt` holding states at every captured k, as a miss would leave it."""
    embedding = context.text_embedder().embed_text([prompt])[0]
    entry_id = uuid.uuid4()
    ks = settings.capture_steps
    with session_scope(settings) as session:
        cache.insert_entry(
            session, entry_id=entry_id, scope=scope, model_family=settings.large_family, prompt=prompt,
            text_embedding=embedding, image_embedding=None, final_latent_key=f"e/{entry_id}/final",
            final_bytes=100, steps=settings.steps, source_job_id=None, size=(64, 64),
            states=[cache.NewState(k=k, blob_key=f"e/{entry_id}/{k}", bytes=100) for k in ks],
        )  # fmt: skip
    return entry_id


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def test_a_job_with_nothing_cached_is_a_searched_miss_sent_to_the_large_pool(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    decision = admit(context_for(Role.ADMIT), job_id)
    assert decision is not None and decision.outcome is AdmissionOutcome.SEARCHED_MISS
    assert dispatcher.of(TaskName.GENERATE)[0].args == (str(job_id),)
    assert dispatcher.of(TaskName.REUSE) == []
    job = _job(task_settings, job_id)
    assert (job.route, job.k, job.admission_outcome) == ("miss", None, "searched_miss")
    assert set(job.admission_ms) >= {"embed", "lookup", "total"}


def test_the_jobs_log_fields_leave_with_the_call(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    """An admit pool's thread (or any caller) keeps its own log context: the job's id and tenant are
    bound for the call only."""
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    with logs.bound(role="admit"):
        before = dict(logs.context())  # a GPU run earlier in this thread may have bound a job of its own
        assert admit(context_for(Role.ADMIT), job_id) is not None
        assert logs.context() == before and before["role"] == "admit"
        assert before.get("job_id") != str(job_id)


def test_a_paraphrase_of_a_cached_prompt_is_a_hit_with_the_tables_k(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    tenant = make_tenant(task_settings)
    entry = _cache_entry(task_settings, context, tenant_scope(tenant), PROMPT)
    job_id = make_job(task_settings, tenant, PROMPT + ".")
    decision = admit(context, job_id)
    assert decision is not None and decision.route is Route.HIT
    assert (
        decision.source_entry_id == entry and decision.similarity is not None and decision.similarity > 0.95
    )
    assert decision.k == 25  # nirvana-t2t: above 0.95 skips 25 of 50
    assert [sent.args for sent in dispatcher.of(TaskName.REUSE)] == [(str(job_id),)]
    assert _job(task_settings, job_id).source_entry_id == entry


def test_another_tenants_entry_is_never_a_hit(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    _cache_entry(task_settings, context, tenant_scope(make_tenant(task_settings)), PROMPT)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    decision = admit(context, job_id)
    assert decision is not None and decision.route is Route.MISS
    assert dispatcher.of(TaskName.REUSE) == []


def test_cache_off_skips_the_search(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT, cache_mode="off")
    decision = admit(context_for(Role.ADMIT), job_id)
    assert decision is not None and decision.outcome is AdmissionOutcome.CACHE_OFF
    assert set(_job(task_settings, job_id).admission_ms) == {"total"}
    assert len(dispatcher.of(TaskName.GENERATE)) == 1


def test_a_redelivered_admission_routes_again_but_decides_and_counts_once(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    first = admit(context, job_id)
    admitted_at = _job(task_settings, job_id).admitted_at
    again = admit(context, job_id)  # the message came back (worker lost before the ack)
    assert first is not None and again is None
    assert _job(task_settings, job_id).admitted_at == admitted_at
    assert [sent.task for sent in dispatcher.sent] == [TaskName.GENERATE, TaskName.GENERATE]


def test_a_job_that_ended_meanwhile_is_left_alone(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT, status=JobStatus.CANCELED.value)
    assert admit(context_for(Role.ADMIT), job_id) is None
    assert dispatcher.sent == []
    assert _job(task_settings, job_id).route is None
