"""Sending an admitted job to the pool that runs it: cache_miss (large) or cache_hit (small)."""

from __future__ import annotations

import uuid

from core.vocabulary import Route
from jobs.celery_app import get_celery_app
from jobs.queues import Queue, TaskName

ROUTE_TASKS: dict[Route, tuple[TaskName, Queue]] = {
    Route.MISS: (TaskName.GENERATE, Queue.CACHE_MISS),
    Route.HIT: (TaskName.REUSE, Queue.CACHE_HIT),
}


def send_route(job_id: uuid.UUID, route: Route, *, countdown: float | None = None) -> None:
    task, queue = ROUTE_TASKS[route]
    get_celery_app().send_task(task.value, args=[str(job_id)], queue=queue.value, countdown=countdown)


def send_decode(job_id: uuid.UUID, fmt: str) -> None:
    get_celery_app().send_task(TaskName.DECODE_IMAGE.value, args=[str(job_id), fmt], queue=Queue.DECODE.value)
