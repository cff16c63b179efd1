"""The worker side of pool control: a worker's role at run time, and how it moves when told to.

jobs.pools.actuator sends two remote control commands; the worker's main process answers them here
(`register_commands`, called by workers.bootstrap before the worker starts): `reprise_role` reports
what the worker hosts and consumes, `reprise_switch_role` moves a large or small worker to the other
pool. A move never drops or repeats a task (acks_late, prefetch 1):
1. the main process stops consuming the queues the new role does not take, so nothing new arrives from
   them; a task already running stays unacknowledged and finishes on the model it started on;
2. it writes the new role into the shared cell; the pool child reads it before its next task
   (`in_pool`) and switches its model then, releasing the old one first (lazily, between tasks);
3. it starts consuming the new role's queues, in the role's order (a large worker drains cache_miss
   before cache_hit, so a queue already consumed is re-added behind the new one).
A message the broker had already handed over for a cancelled queue (a read in flight) is refused by
the child (NotThisPool) and requeued for the right pool; kombu requeues one that arrives with no
consumer left. The three steps run in one event-loop callback, so no delivery falls between them.

The cell is shared memory created in the main process before the pool forks, so every child, also
one forked later to replace a crashed one, sees the same value. Outside a worker (tests, scripts
that build a WorkerContext by hand) there is no cell and the context keeps the role it was built with.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from celery.worker.control import control_command, inspect_command

from core.errors import NotThisPool
from core.settings import Settings, get_settings
from core.vocabulary import Role
from jobs.pools.actuator import ROLE_COMMAND, SWITCH_COMMAND
from jobs.pools.policy import POOL_ROLES
from jobs.queues import QUEUES_BY_ROLE, Queue

if TYPE_CHECKING:
    from workers.context import WorkerContext

log = logging.getLogger(__name__)

_ROLES = tuple(Role)


class RoleCell:
    """One role in shared memory (an index into Role, written by the main process only)."""

    def __init__(self, role: Role) -> None:
        # Fork, like Celery's prefork pool: the children inherit this mapping rather than a copy.
        self._index = multiprocessing.get_context("fork").RawValue(ctypes.c_int, _ROLES.index(role))

    def get(self) -> Role:
        return _ROLES[self._index.value]

    def set(self, role: Role) -> None:
        self._index.value = _ROLES.index(role)


_cell: RoleCell | None = None


def install(role: Role) -> RoleCell:
    """Create this worker's cell (main process, before the pool starts)."""
    global _cell
    _cell = RoleCell(role)
    return _cell


def set_shared_role(role: Role) -> None:
    """Move this worker (main process only; `move_queues`)."""
    if _cell is None:
        raise RuntimeError("no role cell: this process is not a worker's main process")
    _cell.set(role)


def shared_role() -> Role | None:
    """The role the main process consumes for now; None outside a worker."""
    return _cell.get() if _cell is not None else None


def consumed_queues(role: Role, settings: Settings) -> tuple[Queue, ...]:
    """The queues a worker of `role` consumes, in the order it drains them.

    A large worker takes cache_miss first and, when large_serves_hits, the hits only it can serve
    (cache_hit_large) and then cache_hit (the broker's "priority" order drains misses first); every
    other role takes QUEUES_BY_ROLE's queues. A configuration whose hits all need the large pool while
    it serves none is refused at start (jobs.configuration). With the quality guard on, a large worker
    takes quality_audit first: the audits' share of the large pool is bounded by the audit fraction (an
    audit a tenth of hits by default), and taken last they starved under load (26 audits in 600 lab
    requests, docs/results/quality-lab.md), so the guard never had a sample to act on (workers.audit)."""
    queues = QUEUES_BY_ROLE[role]
    if role is Role.LARGE and not settings.large_serves_hits:
        queues = (Queue.CACHE_MISS, Queue.CASCADE_HEAVY)
    if role is Role.LARGE and settings.quality_guard:
        queues = (Queue.QUALITY_AUDIT, *queues)
    if role is Role.SMALL and settings.cohosting:  # then the large model's misses, when no hit waits
        queues = (*queues, *GUEST_QUEUES)
    return queues


GUEST_QUEUES = (Queue.CACHE_MISS, Queue.CACHE_HIT_LARGE)
"""What a co-hosting small worker takes on the large model it also hosts, after its own queues."""


def serving_role(role: Role, queue: Queue, settings: Settings) -> Role:
    """The model a worker of `role` runs a task from `queue` on: a co-hosting small worker's guest
    queues run on the large model, every other queue on the worker's own."""
    return Role.LARGE if role is Role.SMALL and queue in GUEST_QUEUES and settings.cohosting else role


def queue_changes(now: Sequence[str], wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """(cancel, add): how a consumer taking `now`, in order, comes to take `wanted`, in order.

    Consumption order is the order queues were added, so a queue is kept only when no new queue must
    come before it; the others are cancelled, and the missing ones added in `wanted`'s order."""
    new = [queue for queue in wanted if queue not in now]
    room = wanted.index(new[0]) if new else len(wanted)
    kept = [queue for queue in now if queue in wanted[:room]]
    if kept != [queue for queue in wanted[:room] if queue in kept]:  # kept out of order: start over
        kept = []
    return [queue for queue in now if queue not in kept], [queue for queue in wanted if queue not in kept]


@contextmanager
def in_pool(context: WorkerContext, queue: Queue) -> Iterator[None]:
    """Around a GPU task from `queue`: host the worker's current role while the task runs, or refuse it.

    Raises NotThisPool when the current role does not consume `queue` (the task was delivered just
    before a move); otherwise switches the context to the current role (loading its model, releasing
    the old one) when the worker was moved since the last task, once the old role's runs in this process
    have ended (WorkerContext.hosting: a worker with batching threads runs several at once)."""
    role = shared_role() or context.role
    if queue not in consumed_queues(role, context.settings):
        raise NotThisPool(f"a {role.value} worker does not take {queue.value} tasks")
    if role is not context.role:
        log.info("moved from the %s to the %s pool: switching models", context.role.value, role.value)
    with context.hosting(role), context.serving(serving_role(role, queue, context.settings)):
        yield


# --- the remote control commands, in the worker's main process ----------------------------------


def _consuming(consumer: Any) -> list[str]:
    """The task queues the consumer takes now, in its order."""
    task_consumer = consumer.task_consumer
    return [queue.name for queue in task_consumer.queues] if task_consumer is not None else []


def report_role(state: Any, **_: Any) -> dict[str, Any]:
    """What this worker hosts and the queues it consumes."""
    role = shared_role()
    return {"role": role.value if role is not None else None, "queues": _consuming(state.consumer)}


def switch_role(state: Any, role: str, **_: Any) -> dict[str, Any]:
    """Move this worker between the large and the small pool (see the module docstring)."""
    current = shared_role()
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
    wanted = [queue.value for queue in consumed_queues(role, settings)]
    cancel, add = queue_changes(_consuming(consumer), wanted)
    for name in cancel:
        consumer.cancel_task_queue(name)
    set_shared_role(role)
    for name in add:
        consumer.add_task_queue(name)
    log.info("now hosting %s: consuming %s", role.value, ", ".join(wanted))


def register_commands() -> None:
    """Serve the actuator's commands from this process (a worker's main process, before it starts)."""
    control_command(name=SWITCH_COMMAND, args=[("role", str)], signature="<role>")(switch_role)
    inspect_command(name=ROLE_COMMAND)(report_role)
