"""Admission and a job's deadline: a job that asked to fail on its deadline (`on_deadline: fail`) and
waited past it is failed with deadline-unmet instead of run (it could only end late); one that asked
for best effort, or is still in time, is admitted as any other; every run message carries the job's
priority step."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from core.settings import Settings
from core.vocabulary import JobStatus, Role
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import Job
from jobs.priority import DEADLINE_UNMET, broker_step
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.admission import admit
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"


def _waited(settings: Settings, seconds: float, **columns: object) -> uuid.UUID:
    """A waiting job created `seconds` ago."""
    job_id = make_job(
        settings, make_tenant(settings), PROMPT, created_at=utcnow() - timedelta(seconds=seconds), **columns
    )
    return job_id


def _row(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def test_a_job_past_the_deadline_it_asked_to_fail_on_is_failed_not_run(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    late = _waited(task_settings, 30, deadline_s=5.0, on_deadline="fail")
    assert admit(context_for(Role.ADMIT), late) is None
    job = _row(task_settings, late)
    assert job.status == JobStatus.FAILED and job.error is not None and job.error.startswith(DEADLINE_UNMET)
    assert dispatcher.of(TaskName.GENERATE) == []  # never run
    assert [sent.args for sent in dispatcher.of(TaskName.DELIVER_WEBHOOK)] == []  # it asked for no webhook


@pytest.mark.parametrize(
    ("waited_s", "on_deadline"), [(30, "best_effort"), (1, "fail")], ids=["best effort", "in time"]
)
def test_a_job_in_time_or_asking_for_best_effort_is_admitted_at_its_priority(
    task_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
    waited_s: float,
    on_deadline: str,
) -> None:
    job_id = _waited(task_settings, waited_s, deadline_s=5.0, on_deadline=on_deadline, priority="high")
    assert admit(context_for(Role.ADMIT), job_id) is not None
    (sent,) = dispatcher.of(TaskName.GENERATE)
    assert sent.args == (str(job_id),) and sent.priority == broker_step("high")
    assert _row(task_settings, job_id).status == JobStatus.STARTING
