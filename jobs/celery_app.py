"""The Celery app: broker, queues, routing and reliability options. Task bodies live in workers/."""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from kombu.entity import Queue as KombuQueue

from core.settings import Settings, get_settings
from jobs.queues import Queue, TaskName

# Where each task goes. A worker's role decides which queues it consumes (jobs.queues.QUEUES_BY_ROLE).
TASK_ROUTES: dict[str, dict[str, str]] = {
    TaskName.ADMIT: {"queue": Queue.ADMIT},
    TaskName.GENERATE: {"queue": Queue.CACHE_MISS},
    TaskName.REUSE: {"queue": Queue.CACHE_HIT},
    TaskName.DECODE_IMAGE: {"queue": Queue.DECODE},
    TaskName.DELIVER_WEBHOOK: {"queue": Queue.WEBHOOKS},
    TaskName.EVICT: {"queue": Queue.MAINTENANCE},
    TaskName.RETRAIN_PREDICTORS: {"queue": Queue.MAINTENANCE},
    TaskName.REBALANCE_POOLS: {"queue": Queue.MAINTENANCE},
    TaskName.RECONCILE: {"queue": Queue.MAINTENANCE},
}


def make_celery_app(settings: Settings) -> Celery:
    app = Celery("reprise", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        # At-least-once: ack after the body ran; a task whose worker died goes back on the queue.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # Keep each worker's queue order as given, so a large worker drains cache_miss first.
            "queue_order_strategy": "priority",
        },
        broker_connection_retry_on_startup=True,
        task_queues=[KombuQueue(queue.value, routing_key=queue.value) for queue in Queue],  # type: ignore[no-untyped-call]
        task_default_queue=Queue.ADMIT.value,
        task_routes=TASK_ROUTES,
        task_time_limit=settings.task_time_limit_s,
        task_soft_time_limit=max(settings.task_time_limit_s - 30, settings.task_time_limit_s * 9 // 10),
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        # Events on, so Flower shows every queue, task and worker.
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        timezone="UTC",
    )
    from jobs.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule(settings)
    return app


@lru_cache(maxsize=1)
def get_celery_app() -> Celery:
    """The process-wide Celery app, configured from settings."""
    return make_celery_app(get_settings())
