"""worker_roles: which role each worker hosts now, and which roles an operator pinned.

A row is written when a worker starts (workers.registry), when its role changes (the pool monitor,
`reprise pools pin`), and removed when it stops, unless pinned: a pin is the operator's setting and
outlives the process, so a worker restarted under the same name takes its pinned role again.
Functions flush nothing and do not commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, case, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from core.vocabulary import Role
from db.models import WorkerRole


@dataclass(frozen=True, slots=True)
class WorkerRoleRow:
    worker_name: str
    role: Role
    pinned: bool
    since: datetime


def _since_if_changed(new_role: ColumnElement[str]) -> ColumnElement[datetime]:
    """The upsert's `since`: kept while the role stays, now when it changes."""
    return case((WorkerRole.role == new_role, WorkerRole.since), else_=func.now())


def record_role(session: Session, *, worker_name: str, role: Role) -> None:
    """Upsert the worker's current role; `since` moves only when the role changes.

    A pinned row is left alone: its role is the operator's, which the worker takes at start and the
    monitor enforces."""
    statement = insert(WorkerRole).values(worker_name=worker_name, role=role.value, pinned=False)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[WorkerRole.worker_name],
            set_={
                "role": statement.excluded.role,
                "since": _since_if_changed(statement.excluded.role),
            },
            where=WorkerRole.pinned.is_(False),
        )
    )


def pin_role(session: Session, *, worker_name: str, role: Role) -> None:
    """Pin the worker to `role` (the monitor will not move it); creates the row for a worker not seen yet."""
    statement = insert(WorkerRole).values(worker_name=worker_name, role=role.value, pinned=True)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[WorkerRole.worker_name],
            set_={
                "pinned": True,
                "role": statement.excluded.role,
                "since": _since_if_changed(statement.excluded.role),
            },
        )
    )


def unpin(session: Session, *, worker_name: str) -> bool:
    """Let the monitor move the worker again. False when no such worker is recorded."""
    row = session.get(WorkerRole, worker_name)
    if row is None:
        return False
    row.pinned = False
    return True


def pinned_role(session: Session, *, worker_name: str) -> Role | None:
    """The role the worker is pinned to, or None when it is not pinned."""
    row = session.get(WorkerRole, worker_name)
    return Role(row.role) if row is not None and row.pinned else None


def forget(session: Session, *, worker_name: str) -> None:
    """A worker stopped: drop its row unless an operator pinned it."""
    session.execute(
        delete(WorkerRole).where(WorkerRole.worker_name == worker_name, WorkerRole.pinned.is_(False))
    )


def forget_all_but(session: Session, *, alive: Collection[str]) -> int:
    """Drop the unpinned rows of workers not in `alive` (they stopped without a word); how many."""
    result = session.execute(
        delete(WorkerRole).where(WorkerRole.worker_name.not_in(list(alive)), WorkerRole.pinned.is_(False))
    )
    return int(getattr(result, "rowcount", 0) or 0)


def list_roles(session: Session) -> list[WorkerRoleRow]:
    """Every recorded worker, by name."""
    rows = session.scalars(select(WorkerRole).order_by(WorkerRole.worker_name)).all()
    return [WorkerRoleRow(r.worker_name, Role(r.role), r.pinned, r.since) for r in rows]
