"""The reconcile pass against Postgres and the broker's Redis: a job waiting past stuck_after_s is sent
again only when the broker holds no message of it (jobs.broker_contents); a run whose lease expired is
sent again regardless; and the reconciler runs on its own period."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta

import pytest
import redis

from core.settings import Settings, load_settings
from core.vocabulary import JobStatus, Priority, Route
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import Job, Tenant
from jobs.broker_contents import UNACKED, UNACKED_INDEX
from jobs.celery_app import make_celery_app
from jobs.celery_messages import TaskMessages
from jobs.dispatch import CeleryDispatcher
from jobs.passes.reconcile import reconcile
from jobs.priority import broker_step
from jobs.queues import Queue, TaskName, step_lists
from jobs.schedule import beat_schedule
from tests.support.queued import queued_job_ids

pytestmark = pytest.mark.integration


def _old_job(settings: Settings, *, status: JobStatus = JobStatus.STARTING) -> uuid.UUID:
    """A job created ten minutes ago, never admitted; a processing one's lease long expired."""
    with session_scope(settings) as session:
        tenant = Tenant(name=f"reconcile-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_AAAA")
        session.add(tenant)
        session.flush()
        old = utcnow() - timedelta(minutes=10)
        job = Job(tenant_id=tenant.id, prompt="a fox", seed=1, steps=50, width=64, height=64, guidance=7.5)
        job.created_at, job.status = old, status.value
        if status is JobStatus.PROCESSING:
            job.lease_owner, job.lease_until = "a-dead-worker", old
        session.add(job)
        session.flush()
        return job.id


# The list a normal job's admissions wait on (kombu's priority step 3 of the admit queue, jobs.priority).
NORMAL_ADMIT = TaskMessages(TaskName.ADMIT).queue_for(broker_step(Priority.NORMAL))


def _admit_messages(broker: redis.Redis) -> list[str]:
    """The job id of each admission waiting on the normal step of the admit queue, the last sent first."""
    raws = broker.lrange(NORMAL_ADMIT, 0, -1)
    return [json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0] for raw in raws]


def test_only_jobs_whose_message_is_gone_are_sent_again(api_settings: Settings, broker: redis.Redis) -> None:
    settings = api_settings.model_copy(update={"stuck_after_s": 20})
    dispatcher = CeleryDispatcher(make_celery_app(settings))
    queued, lost, taken_now, taken_by_the_dead = (_old_job(settings) for _ in range(4))
    expired = _old_job(settings, status=JobStatus.PROCESSING)
    for job_id in (queued, taken_now, taken_by_the_dead, expired):
        dispatcher.admit(job_id)
    # A worker took two messages off the queue, kombu's way: into `unacked`, with the delivery time.
    raws = broker.lrange(NORMAL_ADMIT, 0, -1)  # LPUSH: the last sent first
    by_job = dict(zip(_admit_messages(broker), raws, strict=True))
    tags = {taken_now: f"tag-{uuid.uuid4()}", taken_by_the_dead: f"tag-{uuid.uuid4()}"}
    for job_id, delivered_ago in ((taken_now, 1.0), (taken_by_the_dead, 60.0)):
        raw = by_job[str(job_id)]
        broker.lrem(NORMAL_ADMIT, 1, raw)  # type: ignore[arg-type]  # redis-py takes bytes too
        broker.hset(UNACKED, tags[job_id], json.dumps([json.loads(raw), "", Queue.ADMIT.value]))
        broker.zadd(UNACKED_INDEX, {tags[job_id]: time.time() - delivered_ago})
    try:
        reconcile(settings, dispatcher, broker)
    finally:
        broker.hdel(UNACKED, *tags.values())
        broker.zrem(UNACKED_INDEX, *tags.values())

    waiting = _admit_messages(broker)
    counts = {job_id: waiting.count(str(job_id)) for job_id in (queued, lost, taken_now, taken_by_the_dead)}
    # Queued: left in its place. Lost: sent. Delivered a second ago: a worker runs it. Delivered a
    # minute ago and never acked: its worker died, sent again.
    assert counts == {queued: 1, lost: 1, taken_now: 0, taken_by_the_dead: 1}
    # A run whose lease expired is sent again although a message of it waits.
    assert waiting.count(str(expired)) == 2


def _queued_jobs(broker: redis.Redis, queue: Queue) -> list[str]:
    """The job id of each message on a queue, in the order workers take them (priority step 0 first;
    BRPOP: the right end first)."""
    return queued_job_ids(broker, queue.value)


def test_a_run_whose_lease_lapsed_goes_to_the_front_of_its_queue(
    api_settings: Settings, broker: redis.Redis
) -> None:
    """Behind a backlog, a run a fault cut is the oldest work of its queue: it is taken next, not after
    every job that came since."""
    settings = api_settings.model_copy(update={"stuck_after_s": 20})
    dispatcher = CeleryDispatcher(make_celery_app(settings))
    broker.delete(*step_lists(Queue.CACHE_MISS.value))
    cut = _old_job(settings, status=JobStatus.PROCESSING)
    with session_scope(settings) as session:
        job = session.get_one(Job, cut)
        job.admitted_at, job.route = utcnow() - timedelta(minutes=9), Route.MISS.value
    backlog = [uuid.uuid4() for _ in range(3)]
    for job_id in backlog:
        dispatcher.run_route(job_id, Route.MISS, settings)
    try:
        reconcile(settings, dispatcher, broker)
        taken = _queued_jobs(broker, Queue.CACHE_MISS)  # other tests' stuck jobs may be there too
        assert taken.count(str(cut)) == 1
        assert taken.index(str(cut)) < min(taken.index(str(job_id)) for job_id in backlog), taken
        assert [job for job in taken if job in map(str, backlog)] == [str(job_id) for job_id in backlog]
    finally:
        broker.delete(*step_lists(Queue.CACHE_MISS.value))


def test_a_broker_that_cannot_be_read_sends_every_stuck_job(
    api_settings: Settings, broker: redis.Redis
) -> None:
    settings = api_settings.model_copy(update={"stuck_after_s": 20})
    queued = _old_job(settings)
    CeleryDispatcher(make_celery_app(settings)).admit(queued)
    unreachable = redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=1)  # nothing listens there
    reconcile(settings, CeleryDispatcher(make_celery_app(settings)), unreachable)
    assert _admit_messages(broker).count(str(queued)) == 2  # a duplicate at worst, never a loss


def test_the_reconciler_runs_on_its_own_period() -> None:
    schedule = beat_schedule(load_settings(reconcile_period_s=10, beat_period_s=30))
    assert schedule["reconcile"]["task"] == TaskName.RECONCILE.value
    assert (schedule["reconcile"]["schedule"], schedule["reconcile"]["options"]["expires"]) == (10.0, 10.0)
    assert schedule["evict"]["schedule"] == 30.0
