"""The cascade's task bodies against the real database (tiny models): a light stage with no trained
discriminator escalates and says why, a redelivered light task changes nothing, the heavy run reports
both stages, and the light stage runs REPRISE_CASCADE_LIGHT_STEPS."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from core.settings import Settings
from core.vocabulary import Allocator, JobStatus, Role, WebhookEvent
from db.engine import session_scope
from db.models import Job
from jobs.priority import broker_step
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.cascade import escalated_job, light_job
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

HOOK = {"webhook_url": "https://hooks.example.com/r", "webhook_events_filter": ["start", "completed"]}


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


@pytest.fixture
def cascade_context(
    task_settings: Settings, dispatcher: RecordingDispatcher
) -> Callable[[Role], WorkerContext]:
    settings = task_settings.model_copy(
        update={"allocator": Allocator.DIFFSERVE, "steps": 10, "cascade_light_steps": 3}
    )

    def make(role: Role) -> WorkerContext:
        return WorkerContext(settings, role, dispatcher=dispatcher)

    return make


def test_without_a_discriminator_the_light_stage_escalates_and_says_why(
    task_settings: Settings, cascade_context: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(
        task_settings,
        make_tenant(task_settings),
        "a fox",
        steps=10,
        route="miss",
        admission_outcome="cache_off",
        cache_mode="off",
        priority="high",
        **HOOK,
    )
    light = cascade_context(Role.SMALL)
    light_job(light, job_id)
    job = _job(task_settings, job_id)
    assert job.status == JobStatus.STARTING and job.route == "heavy" and job.lease_owner is None
    assert job.cascade is not None and job.cascade["escalated"] is True and job.cascade["score"] is None
    assert "reprise cascade train" in job.cascade["reason"]
    assert sum(job.cascade["light_evals"].values()) == 3  # REPRISE_CASCADE_LIGHT_STEPS, not the job's 10
    assert [s.args[0] for s in dispatcher.of(TaskName.ESCALATE)] == [str(job_id)]
    assert dispatcher.of(TaskName.ESCALATE)[0].priority == broker_step("high")  # its job's step

    light_job(light, job_id)  # the broker hands the light task out again: nothing more happens
    assert len(dispatcher.of(TaskName.ESCALATE)) == 1
    assert _job(task_settings, job_id).cascade == job.cascade

    escalated_job(cascade_context(Role.LARGE), job_id)
    done = _job(task_settings, job_id)
    assert done.status == JobStatus.SUCCEEDED and done.attempts == 1
    assert len(done.models_used) == 2 and done.models_used[0] != done.models_used[1]
    assert sum(done.denoiser_evals.values()) == 3 + 10  # both stages' evaluations
    events = [sent.args[1] for sent in dispatcher.of(TaskName.DELIVER_WEBHOOK)]
    assert events == [WebhookEvent.STARTED.value, WebhookEvent.COMPLETED.value]  # once each, over both


def test_the_light_stage_never_runs_more_steps_than_the_request_asked(
    task_settings: Settings, cascade_context: Callable[[Role], WorkerContext]
) -> None:
    job_id = make_job(
        task_settings, make_tenant(task_settings), "a fox", steps=2, route="miss", cache_mode="off"
    )
    light_job(cascade_context(Role.SMALL), job_id)
    stage = _job(task_settings, job_id).cascade
    assert stage is not None and sum(stage["light_evals"].values()) == 2  # not REPRISE_CASCADE_LIGHT_STEPS=3
