"""What the quality guard remembers: audited hits (quality_audits) and each change of the guarded k
table (quality_guard_decisions). Functions flush nothing and do not commit: the caller owns the
transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from db.models import QualityAudit, QualityGuardDecision


@dataclass(frozen=True, slots=True)
class AuditRow:
    similarity: float
    k: int
    drop: float


@dataclass(frozen=True, slots=True)
class AuditSummary:
    audits: int
    drop_mean: float | None
    scorer: str | None  # the newest audit's


def record_audit(
    session: Session,
    *,
    job_id: uuid.UUID,
    similarity: float,
    k: int,
    steps: int,
    hit_score: float,
    fresh_score: float,
    scorer: str,
) -> None:
    session.add(
        QualityAudit(
            job_id=job_id,
            similarity=similarity,
            k=k,
            steps=steps,
            hit_score=hit_score,
            fresh_score=fresh_score,
            drop=fresh_score - hit_score,
            scorer=scorer,
        )
    )


_WINDOWED = text(
    """
    SELECT similarity, k, drop FROM (
        SELECT id, similarity, k, drop, row_number() OVER (
            PARTITION BY floor(similarity / :width + 1e-9), k ORDER BY id DESC
        ) AS position
        FROM quality_audits WHERE steps = :steps AND scorer = :scorer
    ) newest WHERE position <= :window ORDER BY id DESC
    """
)


def windowed_audits(
    session: Session, *, steps: int, scorer: str, bin_width: float, window: int
) -> list[AuditRow]:
    """The newest `window` audits of each (similarity bin, k), newest first: the runs of `steps` (the
    schedule the k table's k's are scaled to) scored by `scorer` (scores of two scorers do not mix)."""
    rows = session.execute(
        _WINDOWED, {"width": bin_width, "steps": steps, "scorer": scorer, "window": window}
    ).all()
    return [AuditRow(float(similarity), int(k), float(drop)) for similarity, k, drop in rows]


def summary(session: Session) -> AuditSummary:
    """How many hits were audited, their mean drop, and the newest audit's scorer."""
    count, mean = session.execute(select(func.count(), func.avg(QualityAudit.drop))).one()
    scorer = session.scalar(select(QualityAudit.scorer).order_by(QualityAudit.id.desc()).limit(1))
    return AuditSummary(int(count), float(mean) if mean is not None else None, scorer)


def record_decision(
    session: Session,
    *,
    base_table: str,
    table: str,
    target: float,
    audits: int,
    changes: list[dict[str, Any]],
    estimates: list[dict[str, Any]],
) -> None:
    session.add(
        QualityGuardDecision(
            base_table=base_table,
            table=table,
            target=target,
            audits=audits,
            changes=changes,
            estimates=estimates,
        )
    )


def latest_decision(session: Session, base_table: str | None = None) -> QualityGuardDecision | None:
    """The newest change of the guarded table; of the one guarding `base_table` when given (a decision
    made for another configured table does not apply)."""
    query = select(QualityGuardDecision).order_by(QualityGuardDecision.id.desc()).limit(1)
    if base_table is not None:
        query = query.where(QualityGuardDecision.base_table == base_table)
    return session.scalar(query)
