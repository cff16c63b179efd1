"""What the read path remembers in Postgres: the decode nodes' tuning decisions (LatentBox 4.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import ReadTierDecision

DECISION_FIELDS = (
    "reads",
    "alpha_before",
    "alpha",
    "promote_after",
    "mr_img",
    "mr_lat",
    "delta_img",
    "delta_lat",
    "t_decode_ms",
    "t_fetch_ms",
    "gradient",
)


def record_tier_decision(session: Session, node: str, decision: Mapping[str, float]) -> None:
    """One closed window of `node`: Eq. 2's inputs, D (`gradient`) and the alpha it chose
    (jobs.policies.tier_tuning.Decision, as workers.decoding.decision_row flattens it)."""
    session.add(ReadTierDecision(node=node, **{name: decision[name] for name in DECISION_FIELDS}))


def latest_tier_decisions(session: Session) -> dict[str, dict[str, Any]]:
    """Each node's newest decision, by node name."""
    newest = (
        select(ReadTierDecision.node, func.max(ReadTierDecision.id).label("id"))
        .group_by(ReadTierDecision.node)
        .subquery()
    )
    rows = session.scalars(select(ReadTierDecision).join(newest, ReadTierDecision.id == newest.c.id)).all()
    return {
        row.node: {
            "decided_at": row.decided_at.isoformat(),
            **{name: getattr(row, name) for name in DECISION_FIELDS},
        }
        for row in rows
    }
