"""The reconciler: Postgres is the truth, so work whose message was lost is sent again."""

from __future__ import annotations

import logging

from core.settings import Settings
from core.vocabulary import Route
from db.engine import session_scope
from db.job_runs import find_stuck
from jobs.dispatch import Dispatcher
from workers.webhook_delivery import enqueue_due_retries

log = logging.getLogger(__name__)


def reconcile(settings: Settings, dispatcher: Dispatcher) -> int:
    """Re-enqueue jobs untouched past stuck_after_s and due webhook retries; return how many.

    Duplicates are harmless: admission and the GPU tasks are idempotent on the job id.
    """
    with session_scope(settings) as session:
        stuck = find_stuck(session, older_than_s=settings.stuck_after_s)
    for job in stuck:
        if job.admitted and job.route is not None:
            dispatcher.run_route(job.job_id, Route(job.route))
        else:
            dispatcher.admit(job.job_id)
    if stuck:
        log.warning("reconciler re-enqueued %d stuck jobs", len(stuck))
    return len(stuck) + enqueue_due_retries(settings=settings, dispatcher=dispatcher)
