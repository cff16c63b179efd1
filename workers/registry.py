"""A worker's row in worker_roles, kept by its main process: the role it starts with, and its record.

At start a large or small worker takes the role an operator pinned it to, if any (a pin outlives the
process); when it is ready to consume it records its role; when it stops it removes its row unless
pinned. The monitor records the moves it makes and drops the rows of workers that stopped without a
word (SIGKILL, a lost machine).

The main process forks the pool children: it talks to the database through connections it closes at
once (no pool), so that no child ever inherits, and shares, one of its sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from core.settings import Settings
from core.vocabulary import Role
from db import worker_roles
from jobs.policies.pool_monitor import POOL_ROLES

log = logging.getLogger(__name__)


@contextmanager
def _unpooled_session(settings: Settings) -> Iterator[Session]:
    engine = create_engine(settings.sqlalchemy_url, poolclass=NullPool)
    try:
        with Session(engine) as session, session.begin():
            yield session
    finally:
        engine.dispose()


def starting_role(settings: Settings, *, worker_name: str, role: Role) -> Role:
    """The role to start with: `role`, or for a pool worker the pool its name is pinned to."""
    if role not in POOL_ROLES:
        return role
    try:
        with _unpooled_session(settings) as session:
            pinned = worker_roles.pinned_role(session, worker_name=worker_name)
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
            with _unpooled_session(settings) as session:
                worker_roles.record_role(session, worker_name=worker_name, role=role)
        except SQLAlchemyError:  # the monitor records every worker that answers it, later
            log.warning("could not record worker %s in worker_roles", worker_name, exc_info=True)

    def on_shutdown(**_: Any) -> None:
        try:
            with _unpooled_session(settings) as session:
                worker_roles.forget(session, worker_name=worker_name)
        except SQLAlchemyError:  # stopping must not fail for want of a database; the monitor prunes later
            log.warning("could not remove worker %s from worker_roles", worker_name, exc_info=True)

    # Strong references: the receivers are closures that nothing else holds.
    worker_ready.connect(on_ready, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
