"""Worker start-up: one role per process, its queues, and its models loaded once per process."""

from __future__ import annotations

import logging
import os
import socket

from celery.signals import worker_process_init

from jobs.celery_app import get_celery_app
from jobs.queues import QUEUES_BY_ROLE, Queue
from jobs.roles import GPU_ROLES, Role
from reprise.settings import get_settings

log = logging.getLogger(__name__)

ROLE_ENV = "REPRISE_WORKER_ROLE"


def worker_node_name(role: Role) -> str:
    return f"{role.value}-{os.getpid()}@{socket.gethostname()}"


def run_worker(role: Role, *, name: str | None = None, concurrency: int = 1) -> None:
    """Run a Celery worker for `role` in the foreground (blocks until it is stopped)."""
    os.environ[ROLE_ENV] = role.value  # read by the child processes' context
    app = get_celery_app()
    import workers.tasks  # noqa: F401  (registers the task bodies on the app)

    settings = get_settings()
    consumed = [q for q in QUEUES_BY_ROLE[role] if not (role is Role.LARGE and q is Queue.CACHE_HIT)]
    if role is Role.LARGE and settings.large_serves_hits:
        consumed.append(Queue.CACHE_HIT)  # after cache_miss: the "priority" order drains misses first
    queues = ",".join(queue.value for queue in consumed)
    argv = [
        "worker",
        f"--queues={queues}",
        f"--hostname={name or worker_node_name(role)}",
        f"--concurrency={concurrency}",
        # prefork: the parent enforces hard time limits by killing a stuck child (the watchdog),
        # and a crashed child's task is requeued (reject_on_worker_lost).
        "--pool=prefork",
        "--loglevel=INFO",
        "--task-events",
        "--without-gossip",
    ]
    app.worker_main(argv)


@worker_process_init.connect
def _load_models_in_child(**_: object) -> None:
    """Load the role's models in each pool process once, before its first task."""
    role_name = os.environ.get(ROLE_ENV)
    if role_name is None:
        return
    role = Role(role_name)
    from workers.context import get_context

    context = get_context()
    if role in GPU_ROLES:
        context.runtime()
    if role in (Role.ADMIT, Role.LARGE, Role.SMALL):
        context.text_embedder()
    log.info("worker process ready for role %s", role.value)
