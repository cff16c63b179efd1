"""pool_decisions: the pool monitor's record, one row per decision (MoDM 5.3, Algorithm 1).

The newest row carries the PID's state, which the next decision continues from; /v1/stats and
/metrics show it. Functions flush nothing and do not commit: the caller owns the transaction.
"""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from db.models import PoolDecision

_MONITOR_LOCK = 0x52455052_504F4F4C  # "REPRPOOL": one pool monitor at a time, cluster-wide


def lock_monitor(session: Session) -> bool:
    """Take the monitor's transaction-scoped advisory lock; False when another decision is running.

    Two beat deliveries (or a beat run and an operator) must not both move workers from the same
    picture of the pool: the second would undo or double the first's moves."""
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _MONITOR_LOCK}))


def wait_for_monitor(session: Session) -> None:
    """Take the same lock, waiting for a running decision to end (an operator's pin or unpin)."""
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MONITOR_LOCK})


def latest_decision(session: Session) -> PoolDecision | None:
    return session.scalars(select(PoolDecision).order_by(PoolDecision.id.desc()).limit(1)).first()


def add_decision(session: Session, decision: PoolDecision) -> PoolDecision:
    session.add(decision)
    return decision
