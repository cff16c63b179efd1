"""Priority on the real broker: a real Celery worker, on kombu's Redis transport, takes a `high` run
sent behind queued `normal` ones before them, and a `low` one after them (jobs.priority's steps)."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis
from celery.contrib.testing.worker import start_worker

from core.settings import Settings
from core.vocabulary import Priority, Route
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.queues import Queue, TaskName, queue_depth

pytestmark = pytest.mark.integration


def test_a_high_run_is_taken_before_the_normal_ones_queued_ahead_of_it(
    api_settings: Settings, broker: redis.Redis
) -> None:
    app = make_celery_app(api_settings)
    taken: list[str] = []
    all_taken = threading.Event()
    normal = [str(uuid.uuid4()) for _ in range(10)]
    low, high = str(uuid.uuid4()), str(uuid.uuid4())

    @app.task(name=TaskName.GENERATE.value)  # type: ignore[untyped-decorator]
    def generate(job_id: str) -> None:  # the large worker's task, as a recorder
        taken.append(job_id)
        if len(taken) == len(normal) + 2:
            all_taken.set()

    dispatcher = CeleryDispatcher(app)
    sent = [(job_id, Priority.NORMAL) for job_id in normal] + [(low, Priority.LOW), (high, Priority.HIGH)]
    for job_id, priority in sent:  # all queued before any worker listens
        dispatcher.run_route(uuid.UUID(job_id), Route.MISS, api_settings, priority=priority)
    assert queue_depth(broker, Queue.CACHE_MISS) == len(sent)
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=[Queue.CACHE_MISS.value], loglevel="WARNING"
    ):
        assert all_taken.wait(60), f"the worker took {len(taken)} of {len(sent)}"
    assert taken == [high, *normal, low]
