"""What became of a scenario's jobs, read from Postgres (the truth) and the bench's webhook receiver.

- lost: accepted (202) and not terminal within the scenario's bound.
- duplicated: effects that happened twice: cache entries made by one job (more than one), webhook
  events answered 2xx more than once (the receiver's count, by webhook-id).
- recovery_s: per job not yet terminal when the fault ended, seconds from the fault's end to its
  terminal state; p50 and max over the scenario's jobs. Behind a long queue this is mostly the queue's
  drain time, whatever the fault.
- running_recovery_s: the same over the jobs that were running (`processing`) when the fault struck: the
  runs the fault interrupted or held up, which recovery must bring to an end; with `jobs`, their count.
  For webhook-outage, the events the receiver refused while it was down, delivered after it.
- duplicate_runs: GPU runs beyond one per job (its attempts less one): a run cut by the fault (its
  lease lost) and started again elsewhere counts one; a job's effects still happen once (duplicated).
- lost_detail: per lost job, its status, route, attempts and last error, so a lost job says where it
  stopped.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from core.settings import Settings
from core.vocabulary import TERMINAL_STATUSES
from db.engine import session_scope
from db.models import CacheEntry, Job


@dataclass(frozen=True)
class JobEnd:
    status: str
    error: str | None
    finished_at: datetime | None
    route: str | None = None
    attempts: int = 0


def job_ends(settings: Settings, job_ids: list[str]) -> dict[str, JobEnd] | None:
    """Each job's status now; None while Postgres cannot be read (a fault in progress)."""
    ids = [uuid.UUID(job_id) for job_id in job_ids]
    try:
        with session_scope(settings, pooled=False) as session:
            rows = session.execute(
                select(Job.id, Job.status, Job.error, Job.finished_at).where(Job.id.in_(ids))
            )
            return {str(row[0]): JobEnd(row[1], row[2], row[3]) for row in rows}
    except OperationalError:
        return None


def all_terminal(ends: dict[str, JobEnd] | None, job_ids: list[str]) -> bool:
    return ends is not None and all(
        job_id in ends and ends[job_id].status in TERMINAL_STATUSES for job_id in job_ids
    )


def duplicated_entries(settings: Settings, job_ids: list[str]) -> int:
    """Jobs that made more than one cache entry."""
    ids = [uuid.UUID(job_id) for job_id in job_ids]
    with session_scope(settings, pooled=False) as session:
        counts = session.execute(
            select(CacheEntry.source_job_id, func.count())
            .where(CacheEntry.source_job_id.in_(ids))
            .group_by(CacheEntry.source_job_id)
        )
        return sum(1 for _, count in counts if count > 1)


def duplicate_runs(settings: Settings, job_ids: list[str]) -> int:
    """GPU runs beyond one per job: each job's attempts less one (a hit rerouted to a miss gives its
    attempt back, so it counts none)."""
    ids = [uuid.UUID(job_id) for job_id in job_ids]
    with session_scope(settings, pooled=False) as session:
        attempts = session.scalars(select(Job.attempts).where(Job.id.in_(ids)))
        return sum(max(0, count - 1) for count in attempts)


@dataclass
class ScenarioReport:
    accepted: int = 0
    succeeded: int = 0
    failed: int = 0
    failed_reasons: Counter[str] = field(default_factory=Counter)
    canceled: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicated_detail: dict[str, int] = field(default_factory=dict)
    duplicate_runs: int = 0
    recovery: list[float] = field(default_factory=list)
    running_recovery: list[float] = field(default_factory=list)
    running_at_fault_end: int = 0
    lost_detail: Counter[str] = field(default_factory=Counter)
    unavailable_s: float = 0.0
    five_xx: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "accepted": self.accepted,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failed_reasons": dict(self.failed_reasons),
            "canceled": self.canceled,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "duplicated_detail": self.duplicated_detail,
            "duplicate_runs": self.duplicate_runs,
            "recovery_s": _p50_max(self.recovery),
            "running_recovery_s": _p50_max(self.running_recovery) | {"jobs": self.running_at_fault_end},
            "lost_detail": dict(self.lost_detail),
            "unavailable_s": round(self.unavailable_s, 2),
            "five_xx": self.five_xx,
        }


def _p50_max(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": round(statistics.median(values), 2) if values else None,
        "max": round(max(values), 2) if values else None,
    }


def tally(
    report: ScenarioReport,
    ends: dict[str, JobEnd],
    job_ids: list[str],
    *,
    fault_end: float,
    running: frozenset[str] = frozenset(),
) -> None:
    """Count outcomes and recovery times into the report; `running`: the jobs processing when the fault
    struck (their recovery is also counted apart)."""
    report.accepted = len(job_ids)
    report.running_at_fault_end = len(running & set(job_ids))
    for job_id in job_ids:
        end = ends.get(job_id)
        if end is None or end.status not in TERMINAL_STATUSES:
            report.lost += 1
            report.lost_detail[_where(end)] += 1
            continue
        if end.status == "succeeded":
            report.succeeded += 1
        elif end.status == "failed":
            report.failed += 1
            report.failed_reasons[(end.error or "no reason")[:120]] += 1
        else:
            report.canceled += 1
        if end.finished_at is not None and end.finished_at.timestamp() > fault_end:
            report.recovery.append(end.finished_at.timestamp() - fault_end)
            if job_id in running:
                report.running_recovery.append(end.finished_at.timestamp() - fault_end)


def _where(end: JobEnd | None) -> str:
    """Where a lost job stopped, as a key to count: status, route, attempts, last error."""
    if end is None:
        return "no row"
    return f"{end.status} route={end.route} attempts={end.attempts} error={(end.error or '-')[:80]}"


def running_jobs(settings: Settings, job_ids: list[str], *, wait_s: float = 30.0) -> frozenset[str]:
    """The jobs processing now (read again while Postgres cannot be read, at most wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        ends = job_ends(settings, job_ids)
        if ends is not None:
            return frozenset(job for job, end in ends.items() if end.status == "processing")
        if time.monotonic() > deadline:
            return frozenset()
        time.sleep(0.5)
