"""The GPU pools' record: which role each worker hosts (worker_roles) and the monitor's decisions
(pool_decisions), with the lock that keeps one decision at a time.

worker_roles: a row is written when a worker starts (workers.registry), when its role changes (the pool
monitor, `reprise pools pin`), and removed when it stops, unless pinned: a pin is the operator's setting
and outlives the process, so a worker restarted under the same name takes its pinned role again.

pool_decisions: one row per decision of the monitor (MoDM 5.3, Algorithm 1). The newest carries the
PID's state, which the next decision continues from; /v1/stats and /metrics show it.

Functions flush nothing and do not commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, case, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from core.vocabulary import Role
from db.models import PoolDecision, WorkerRoleRow

_MONITOR_LOCK = 0x52455052_504F4F4C  # "REPRPOOL": one pool monitor at a time, cluster-wide


# --- worker_roles ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedWorker:
    """A worker as worker_roles records it."""

    worker_name: str
    role: Role
    pinned: bool
    since: datetime


def _since_if_changed(new_role: ColumnElement[str]) -> ColumnElement[datetime]:
    """The upsert's `since`: kept while the role stays, now when it changes."""
    return case((WorkerRoleRow.role == new_role, WorkerRoleRow.since), else_=func.now())


def record_role(session: Session, *, worker_name: str, role: Role) -> None:
    """Upsert the worker's current role; `since` moves only when the role changes.

    A pinned row is left alone: its role is the operator's, which the worker takes at start and the
    monitor enforces."""
    statement = insert(WorkerRoleRow).values(worker_name=worker_name, role=role.value, pinned=False)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[WorkerRoleRow.worker_name],
            set_={
                "role": statement.excluded.role,
                "since": _since_if_changed(statement.excluded.role),
            },
            where=WorkerRoleRow.pinned.is_(False),
        )
    )


def pin_role(session: Session, *, worker_name: str, role: Role) -> None:
    """Pin the worker to `role` (the monitor will not move it); creates the row for a worker not seen yet."""
    statement = insert(WorkerRoleRow).values(worker_name=worker_name, role=role.value, pinned=True)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[WorkerRoleRow.worker_name],
            set_={
                "pinned": True,
                "role": statement.excluded.role,
                "since": _since_if_changed(statement.excluded.role),
            },
        )
    )


def unpin(session: Session, *, worker_name: str) -> bool:
    """Let the monitor move the worker again. False when no such worker is recorded."""
    row = session.get(WorkerRoleRow, worker_name)
    if row is None:
        return False
    row.pinned = False
    return True


def pinned_role(session: Session, *, worker_name: str) -> Role | None:
    """The role the worker is pinned to, or None when it is not pinned."""
    row = session.get(WorkerRoleRow, worker_name)
    return Role(row.role) if row is not None and row.pinned else None


def forget(session: Session, *, worker_name: str) -> None:
    """A worker stopped: drop its row unless an operator pinned it."""
    session.execute(
        delete(WorkerRoleRow).where(WorkerRoleRow.worker_name == worker_name, WorkerRoleRow.pinned.is_(False))
    )


def forget_all_but(session: Session, *, alive: Collection[str]) -> int:
    """Drop the unpinned rows of workers not in `alive` (they stopped without a word); how many."""
    result = session.execute(
        delete(WorkerRoleRow).where(
            WorkerRoleRow.worker_name.not_in(list(alive)), WorkerRoleRow.pinned.is_(False)
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


def recorded_workers(session: Session) -> list[RecordedWorker]:
    """Every recorded worker, by name."""
    rows = session.scalars(select(WorkerRoleRow).order_by(WorkerRoleRow.worker_name)).all()
    return [RecordedWorker(r.worker_name, Role(r.role), r.pinned, r.since) for r in rows]


def pinned_workers(session: Session) -> dict[str, Role]:
    """Every pinned worker, running or not, with the role it is pinned to."""
    return {row.worker_name: row.role for row in recorded_workers(session) if row.pinned}


# --- pool_decisions and the monitor's lock --------------------------------------------------------


def lock_monitor(session: Session) -> bool:
    """Take the monitor's transaction-scoped advisory lock; False when another decision is running.

    Two beat deliveries (or a beat run and an operator) must not both move workers from the same
    picture of the pool: the second would undo or double the first's moves."""
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _MONITOR_LOCK}))


def wait_for_monitor(session: Session) -> None:
    """Take the same lock, waiting for a running decision to end (an operator's pin or unpin)."""
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MONITOR_LOCK})


def latest_decision(session: Session) -> PoolDecision | None:
    """The monitor's newest decision; None before the first."""
    return session.scalars(select(PoolDecision).order_by(PoolDecision.id.desc()).limit(1)).first()


def add_decision(session: Session, decision: PoolDecision) -> PoolDecision:
    session.add(decision)
    return decision


def database_now(session: Session) -> datetime:
    """The database's clock: the monitor's periods are cut by it, as the statistics are."""
    now: datetime | None = session.scalar(select(func.now()))
    if now is None:
        raise RuntimeError("the database returned no time")
    return now


def workers_per_role(session: Session) -> dict[str, int]:
    """How many recorded workers host each role now, by role name."""
    rows = session.execute(
        select(WorkerRoleRow.role, func.count()).group_by(WorkerRoleRow.role).order_by(WorkerRoleRow.role)
    )
    return {role: int(count) for role, count in rows}
