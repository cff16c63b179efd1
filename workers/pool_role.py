"""A worker's role at run time: shared by its main process and its pool children.

The role decides which queues the main process consumes and which model the pool child hosts.
When the monitor moves a worker (workers.control), the main process changes its queues and writes
the new role here; the child reads it before each task and switches its model then (lazily, between
tasks, so a running task always finishes on the model it started on).

The cell is shared memory created in the main process before the pool forks, so every child, also
one forked later to replace a crashed one, sees the same value. Outside a worker (tests, scripts
that build a WorkerContext by hand) there is no cell and the context keeps the role it was built with.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.errors import NotThisPool
from core.settings import Settings
from core.vocabulary import Role
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
    """Move this worker (main process only; workers.control)."""
    if _cell is None:
        raise RuntimeError("no role cell: this process is not a worker's main process")
    _cell.set(role)


def shared_role() -> Role | None:
    """The role the main process consumes for now; None outside a worker."""
    return _cell.get() if _cell is not None else None


def consumed_queues(role: Role, settings: Settings) -> tuple[Queue, ...]:
    """The queues a worker of `role` consumes, in the order it drains them.

    A large worker takes cache_miss first and, when large_serves_hits, cache_hit after it (the broker's
    "priority" order drains misses first); every other role takes QUEUES_BY_ROLE's queues."""
    if role is Role.LARGE:
        return (Queue.CACHE_MISS, Queue.CACHE_HIT) if settings.large_serves_hits else (Queue.CACHE_MISS,)
    return QUEUES_BY_ROLE[role]


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


def enter_pool(context: WorkerContext, queue: Queue) -> None:
    """Before a GPU task from `queue`: host the worker's current role, or refuse the task.

    Raises NotThisPool when the current role does not consume `queue` (the task was delivered just
    before a move); otherwise switches the context to the current role (loading its model, releasing
    the old one) when the worker was moved since the last task."""
    role = shared_role() or context.role
    if queue not in consumed_queues(role, context.settings):
        raise NotThisPool(f"a {role.value} worker does not take {queue.value} tasks")
    if role is not context.role:
        log.info("moved from the %s to the %s pool: switching models", context.role.value, role.value)
        context.switch_role(role)
