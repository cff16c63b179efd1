"""The Celery app: broker, queues, routing and reliability options. Task bodies live in workers/."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Celery
from celery.signals import setup_logging
from kombu.entity import Queue as KombuQueue

from core.logs import configure_logging
from core.settings import Settings, get_settings
from jobs.broker import transport_options
from jobs.broker_transport import transport_for
from jobs.queues import ROUTES, Queue


def task_routes() -> dict[str, dict[str, str]]:
    """Celery's task_routes, from the route table (jobs.queues.ROUTES)."""
    return {task.value: {"queue": queue.value} for task, queue in ROUTES.items()}


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
            # A sentinel:// URL goes through kombu's Sentinel transport, which needs the master's name.
            **transport_options(settings),
        },
        # kombu's Redis transport whose failed ack still frees the prefetch slot (jobs.broker_transport).
        broker_transport=transport_for(settings.broker_url),
        broker_connection_retry_on_startup=True,
        # Ride out a broker outage of any length: reconnect forever, with Celery's growing
        # interval, rather than exit after 100 tries; messages held unacked come back after the
        # visibility timeout, and Postgres-side the reconciler re-sends whatever was lost.
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        task_queues=[KombuQueue(queue.value, routing_key=queue.value) for queue in Queue],  # type: ignore[no-untyped-call]
        task_default_queue=Queue.ADMIT.value,
        task_routes=task_routes(),
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
        # One beat at a time, on any number of machines: beat ticks only while it holds a lock in Redis.
        beat_scheduler="jobs.beat_lock:LockedScheduler",
        reprise_beat_lock_ttl_s=settings.beat_lock_ttl_s,
        reprise_beat_lock_renew_s=settings.beat_lock_renew_s,
        reprise_redis_sentinel_master=settings.redis_sentinel_master,
    )
    from jobs.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule(settings)
    return app


@lru_cache(maxsize=1)
def get_celery_app() -> Celery:
    """The process-wide Celery app, configured from settings."""
    return make_celery_app(get_settings())


@setup_logging.connect
def _configure_logging(**_: Any) -> None:
    """Celery's processes (workers, beat, Flower) log the project's way, JSON or text (core.logs)."""
    configure_logging(get_settings().log_format)
