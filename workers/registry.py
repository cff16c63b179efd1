"""A worker's row in worker_roles, kept by its main process: the role it starts with, and its record.

At start a large or small worker takes the role an operator pinned it to, if any (a pin outlives the
process); when it is ready to consume it records its role; when it stops it removes its row unless
pinned. The monitor records the moves it makes and drops the rows of workers that stopped without a
word (SIGKILL, a lost machine).

The main process forks the pool children: it talks to the database through sessions whose connection
is closed at once (db.engine's unpooled sessions), so that no child ever inherits, and shares, one of
its sockets. The SQL is db.pools'; the other half of the worker side is workers.role_switch.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from sqlalchemy.exc import SQLAlchemyError

from core.settings import Settings
from core.vocabulary import Role
from db import pools
from db.engine import session_scope
from jobs.pools.policy import POOL_ROLES

log = logging.getLogger(__name__)


def starting_role(settings: Settings, *, worker_name: str, role: Role) -> Role:
    """The role to start with: `role`, or for a pool worker the pool its name is pinned to."""
    if role not in POOL_ROLES:
        return role
    try:
        with session_scope(settings, pooled=False) as session:
            pinned = pools.pinned_role(session, worker_name=worker_name)
    except SQLAlchemyError:  # the worker's tasks will say what is wrong with the database
        log.warning("could not read the pins of %s; starting as %s", worker_name, role.value, exc_info=True)
        return role
    if pinned in POOL_ROLES and pinned is not role:
        log.info("worker %s is pinned to %s: starting as %s, not %s", worker_name, pinned, pinned, role)
        return pinned
    return role


def keep_record(settings: Settings, *, worker_name: str, role: Role) -> None:
    """Record the worker's role once it consumes, and forget it when it stops (main process)."""

    def on_ready(**_: Any) -> None:
        try:
            with session_scope(settings, pooled=False) as session:
                pools.record_role(session, worker_name=worker_name, role=role)
        except SQLAlchemyError:  # the monitor records every worker that answers it, later
            log.warning("could not record worker %s in worker_roles", worker_name, exc_info=True)

    def on_shutdown(**_: Any) -> None:
        try:
            with session_scope(settings, pooled=False) as session:
                pools.forget(session, worker_name=worker_name)
        except SQLAlchemyError:  # stopping must not fail for want of a database; the monitor prunes later
            log.warning("could not remove worker %s from worker_roles", worker_name, exc_info=True)

    # Strong references: the receivers are closures that nothing else holds.
    worker_ready.connect(on_ready, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
