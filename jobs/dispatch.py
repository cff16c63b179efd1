"""Sending work to the queues from outside a worker (the API), and the decode contract it reads images
through. The one place the API touches Celery.

Enqueueing is best effort: Postgres holds the job first, and the reconciler re-enqueues any job left
'starting' too long, so a broker outage delays a job but never loses it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

import redis

from jobs.queues import Queue, TaskName
from jobs.webhooks import WebhookEvent

if TYPE_CHECKING:
    from celery import Celery

    from core.settings import Settings

# Fail fast when the broker is down: the API must answer, and the job is safe in Postgres anyway.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


class Dispatcher(Protocol):
    """Puts tasks on the broker. Implementations raise on failure; callers decide if that matters."""

    def enqueue_admit(self, job_id: uuid.UUID) -> None: ...

    def enqueue_webhook(
        self, job_id: uuid.UUID, event: WebhookEvent, *, attempt: int = 1, countdown: float = 0.0
    ) -> None: ...


class CeleryDispatcher:
    """A Dispatcher over a Celery app. Uses send_task by name, so no task module is imported here."""

    def __init__(self, celery: Celery) -> None:
        self.celery = celery

    def enqueue_admit(self, job_id: uuid.UUID) -> None:
        self.celery.send_task(
            TaskName.ADMIT.value,
            args=[str(job_id)],
            queue=Queue.ADMIT.value,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
        )

    def enqueue_webhook(
        self, job_id: uuid.UUID, event: WebhookEvent, *, attempt: int = 1, countdown: float = 0.0
    ) -> None:
        """Args of reprise.deliver_webhook: [job_id, event, attempt] (see workers.webhook_delivery)."""
        self.celery.send_task(
            TaskName.DELIVER_WEBHOOK.value,
            args=[str(job_id), event.value, attempt],
            queue=Queue.WEBHOOKS.value,
            countdown=countdown or None,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
        )


def default_dispatcher() -> CeleryDispatcher:
    """Over the process-wide Celery app (from the environment's settings)."""
    from jobs.celery_app import get_celery_app  # deferred: building the app reads settings

    return CeleryDispatcher(get_celery_app())


def dispatcher_for(settings: Settings) -> CeleryDispatcher:
    """Over a Celery app for these settings (an API app built with its own settings)."""
    from jobs.celery_app import make_celery_app

    return CeleryDispatcher(make_celery_app(settings))


def enqueue_admit(job_id: uuid.UUID) -> None:
    """Queue the admission of a job that is committed in Postgres as 'starting'."""
    default_dispatcher().enqueue_admit(job_id)


def enqueue_webhook(
    job_id: uuid.UUID, event: WebhookEvent, *, attempt: int = 1, countdown: float = 0.0
) -> None:
    """Queue one delivery attempt of a job's webhook event."""
    default_dispatcher().enqueue_webhook(job_id, event, attempt=attempt, countdown=countdown)


def queue_depth(client: redis.Redis, queue: Queue) -> int | None:
    """Messages waiting in a queue (Celery's Redis transport keeps each queue as a list named after
    it); None when the broker cannot be asked."""
    try:
        return int(client.llen(queue.value))
    except redis.RedisError:
        return None


# --- decoding images on read (LatentBox) ---------------------------------------------------------


class ImageDecoder(Protocol):
    """Turns a succeeded job's final latent into an encoded image.

    Contract: return the image bytes in `fmt` ('png', 'webp' or 'jpeg'); raise DecodeTimeout when
    the decode pool does not answer in time, and core.errors.BlobNotFound when the latent is gone.
    """

    def decode(self, job_id: uuid.UUID, fmt: str) -> bytes: ...
