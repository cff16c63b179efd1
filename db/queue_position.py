"""The figures behind a waiting job's queue_position and estimate (jobs.estimates): the jobs ahead of
it on its route, the workers serving that route, the route's recent run time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.vocabulary import PRIORITY_RANK as RANK
from core.vocabulary import JobStatus, Priority, Role, Route
from db.models import Job
from db.pools import workers_per_role

RECENT_JOBS: Final = 50  # the run time is the mean of the route's last 50 succeeded jobs
MEAN_TTL_S: Final = 10.0  # a process reuses a route's mean this long (a GET per second costs no scan)
_means: dict[str | None, tuple[float, float | None]] = {}


@dataclass(frozen=True, slots=True)
class QueueView:
    """What the database says about a waiting job's queue."""

    ahead: int  # jobs waiting before it on the same route (or for admission)
    workers: int  # workers serving that route now
    mean_run_s: float | None  # the route's recent mean run time; None with no recent job


def _serving_roles(route: str | None, *, large_serves_hits: bool) -> tuple[str, ...]:
    if route is None:
        return (Role.ADMIT.value,)
    if route == Route.HIT.value:
        return (Role.SMALL.value, Role.LARGE.value) if large_serves_hits else (Role.SMALL.value,)
    return (Role.LARGE.value,)


def jobs_ahead(session: Session, job: Job) -> int:
    """Waiting jobs before `job`: admitted earlier on its route, or created earlier when it waits for
    admission (the partial index ix_jobs_waiting covers both)."""
    waiting = select(func.count()).select_from(Job).where(Job.status == JobStatus.STARTING.value)
    if job.route is None or job.admitted_at is None:
        query = waiting.where(Job.route.is_(None), Job.created_at < job.created_at)
    else:
        query = waiting.where(Job.route == job.route, Job.admitted_at < job.admitted_at)
    return int(session.execute(query).scalar_one())


def mean_run_s(session: Session, route: str | None) -> float | None:
    """The mean run time (admission: its total) of the route's last RECENT_JOBS jobs."""
    now = time.monotonic()
    cached = _means.get(route)
    if cached is not None and now - cached[0] < MEAN_TTL_S:
        return cached[1]
    if route is None:
        recent = (
            select(Job.admission_ms["total"].as_float().label("ms"))
            .where(Job.admitted_at.is_not(None))
            .order_by(Job.created_at.desc())
            .limit(RECENT_JOBS)
            .subquery()
        )
        value = session.execute(select(func.avg(recent.c.ms) / 1000.0)).scalar_one()
    else:
        recent = (
            select(func.extract("epoch", Job.finished_at - Job.started_at).label("s"))
            .where(Job.route == route, Job.status == JobStatus.SUCCEEDED.value)
            .order_by(Job.created_at.desc())
            .limit(RECENT_JOBS)
            .subquery()
        )
        value = session.execute(select(func.avg(recent.c.s))).scalar_one()
    mean = float(value) if value is not None else None
    _means[route] = (now, mean)
    return mean


def queue_view(session: Session, job: Job, *, large_serves_hits: bool) -> QueueView:
    counts = workers_per_role(session)
    roles = _serving_roles(job.route, large_serves_hits=large_serves_hits)
    return QueueView(
        ahead=jobs_ahead(session, job),
        workers=sum(counts.get(role, 0) for role in roles),
        mean_run_s=mean_run_s(session, job.route),
    )


def submission_view(session: Session, priority: Priority) -> QueueView:
    """The queue a job being submitted would join, as its deadline is checked against it: the waiting
    jobs of its priority and above that will run on the large pool (admitted misses and those not yet
    admitted, which may well miss), the large workers, the miss route's recent run time. The cache may
    serve it sooner; a deadline refused on this estimate is refused on the likely case, a miss."""
    ranks = [p.value for p in Priority if RANK[p] <= RANK[priority]]
    waiting = (
        select(func.count())
        .select_from(Job)
        .where(
            Job.status == JobStatus.STARTING.value,
            Job.priority.in_(ranks),
            Job.route.is_(None) | Job.route.in_([Route.MISS.value, Route.HEAVY.value]),
        )
    )
    return QueueView(
        ahead=int(session.execute(waiting).scalar_one()),
        workers=workers_per_role(session).get(Role.LARGE.value, 0),
        mean_run_s=mean_run_s(session, Route.MISS.value),
    )
