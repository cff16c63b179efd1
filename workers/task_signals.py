"""What every task of a worker gets around it (Celery signals): its log context (role, queue, task, task
id; the job's id and tenant once the body binds them), its metrics (count by state, wall time) and, once
it ended, the worker's pulse (workers.liveness: a worker that finishes work is alive)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_process_shutdown

from core import logs
from jobs.queues import ROUTES, TaskName
from workers import liveness, metrics

_started: dict[str, float] = {}
QUEUE_FIELD = "queue"


def task_queue(name: str) -> str:
    """The queue a task is routed to (jobs.queues.ROUTES), for labels and log lines."""
    try:
        return ROUTES[TaskName(name)].value
    except ValueError:
        return "other"


def current_queue() -> str:
    """The queue of the task this process is running ("other" outside a task)."""
    return logs.context().get(QUEUE_FIELD, "other")


@task_prerun.connect
def _task_started(task_id: str, task: Any, **_: Any) -> None:
    _started[task_id] = time.perf_counter()
    from workers.context import get_context

    logs.clear()
    logs.bind(role=get_context().role.value, queue=task_queue(task.name), task=task.name, task_id=task_id)


@task_postrun.connect
def _task_ended(task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    liveness.pulse().finished()
    metrics.TASKS.labels(task=task.name, state=(state or "UNKNOWN").lower()).inc()
    if started is not None:
        metrics.TASK_SECONDS.labels(task=task.name).observe(time.perf_counter() - started)
    logs.clear()


@worker_process_shutdown.connect
def _forget_process(pid: int | None = None, **_: Any) -> None:
    metrics.process_exited(pid if pid is not None else os.getpid())
