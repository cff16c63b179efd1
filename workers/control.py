"""The remote control commands of a worker's main process: report its role, move it to another pool.

A move never drops or repeats a task (jobs.queues; acks_late, prefetch 1):
1. the worker stops consuming the queues the new role does not take, so nothing new arrives from them;
   a task already running stays unacknowledged and finishes on the model it started on, then is acked;
2. it writes the new role into the shared cell (workers.pool_role); the pool child reads it before its
   next task and switches its model then, releasing the old one first;
3. it starts consuming the new role's queues, in the role's order (a large worker drains cache_miss
   before cache_hit, so a queue already consumed is re-added behind the new one).
A message the broker had already handed over for a cancelled queue (a read in flight) is refused by
the child (NotThisPool) and requeued for the right pool; kombu requeues one that arrives with no
consumer left. The three steps run in one event-loop callback, so no delivery falls between them.

Registered on import (workers.bootstrap imports this module before the worker starts).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.control import control_command, inspect_command

from core.settings import Settings, get_settings
from core.vocabulary import Role
from jobs.policies.pool_monitor import POOL_ROLES
from jobs.pool_control import ROLE_COMMAND, SWITCH_COMMAND
from workers import pool_role

log = logging.getLogger(__name__)


def _consuming(consumer: Any) -> list[str]:
    """The task queues the consumer takes now, in its order."""
    task_consumer = consumer.task_consumer
    return [queue.name for queue in task_consumer.queues] if task_consumer is not None else []


def report_role(state: Any, **_: Any) -> dict[str, Any]:
    """What this worker hosts and the queues it consumes."""
    role = pool_role.shared_role()
    return {"role": role.value if role is not None else None, "queues": _consuming(state.consumer)}


def switch_role(state: Any, role: str, **_: Any) -> dict[str, Any]:
    """Move this worker between the large and the small pool (see the module docstring)."""
    current = pool_role.shared_role()
    try:
        wanted = Role(role)
    except ValueError:
        return {"error": f"unknown role {role!r}"}
    if current not in POOL_ROLES or wanted not in POOL_ROLES:
        return {"error": f"only large and small workers move; this one hosts {current}, asked {role}"}
    if wanted is not current:
        state.consumer.call_soon(move_queues, state.consumer, wanted, get_settings())
    return {"ok": {"role": wanted.value, "previous": current.value}}


def move_queues(consumer: Any, role: Role, settings: Settings) -> None:
    """Steps 1-3 of a move, on the worker's event loop."""
    wanted = [queue.value for queue in pool_role.consumed_queues(role, settings)]
    cancel, add = pool_role.queue_changes(_consuming(consumer), wanted)
    for name in cancel:
        consumer.cancel_task_queue(name)
    pool_role.set_shared_role(role)
    for name in add:
        consumer.add_task_queue(name)
    log.info("now hosting %s: consuming %s", role.value, ", ".join(wanted))


control_command(name=SWITCH_COMMAND, args=[("role", str)], signature="<role>")(switch_role)
inspect_command(name=ROLE_COMMAND)(report_role)
