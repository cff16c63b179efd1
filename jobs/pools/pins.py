"""The operator's override of the pool monitor: pin a worker to a pool, or let the monitor move it again."""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import Settings
from core.vocabulary import Role
from db import pools
from db.engine import session_scope
from jobs.pools.actuator import PoolActuator
from jobs.pools.policy import POOL_ROLES


@dataclass(frozen=True, slots=True)
class PinOutcome:
    """alive: the worker answered; moved: it was asked to change pool and accepted."""

    worker: str
    role: Role
    alive: bool
    moved: bool


def pin_worker(settings: Settings, actuator: PoolActuator, *, worker: str, role: Role) -> PinOutcome:
    """Pin `worker` to `role` (large or small) and, when it runs in the other pool, move it now.

    The pin is written first, under the monitor's lock, so that no decision in progress moves the
    worker back; a worker that is not running takes its pinned role when it starts under that name."""
    if role not in POOL_ROLES:
        raise ValueError(f"a worker is pinned to large or small, not {role.value}")
    with session_scope(settings) as session:
        pools.wait_for_monitor(session)
        pools.pin_role(session, worker_name=worker, role=role)
        current = actuator.roles().get(worker)
        if current is not None and current not in POOL_ROLES:
            raise ValueError(f"worker {worker} hosts {current.value}; only large and small workers move")
        moved = current is not None and current is not role and actuator.switch(worker, role)
    return PinOutcome(worker=worker, role=role, alive=current is not None, moved=moved)


def unpin_worker(settings: Settings, *, worker: str) -> bool:
    """Let the monitor move `worker` again; False when no such worker is recorded."""
    with session_scope(settings) as session:
        pools.wait_for_monitor(session)
        return pools.unpin(session, worker_name=worker)
