"""A running job's progress: recorded on its row and announced on Redis, every few steps, cheaply.

The first step is reported at once (the job visibly runs), then at most every PROGRESS_EVERY_S, and the
last step: a 50-step generation on a GPU (~40 ms a step) writes about five times, not fifty. A failed
write costs the reader a stale figure, never the run: progress is best effort.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Final

import redis
from sqlalchemy.exc import SQLAlchemyError

from db.engine import session_scope
from db.job_runs import record_progress
from jobs.job_events import announce_progress
from workers.context import WorkerContext

PROGRESS_EVERY_S: Final = 0.5
log = logging.getLogger(__name__)


class ProgressReporter:
    """The OnStep hook of one run (workers.runtime.denoising.OnStep)."""

    def __init__(
        self, context: WorkerContext, job_id: uuid.UUID, *, every_s: float = PROGRESS_EVERY_S
    ) -> None:
        self.context = context
        self.owner = context.owner  # the run's, taken in its task: the batch loop's thread calls this hook
        self.job_id = job_id
        self.every_s = every_s
        self.reported: list[tuple[int, int]] = []
        self._last = float("-inf")

    def __call__(self, step: int, total: int) -> None:
        now = time.monotonic()
        if step < total and now - self._last < self.every_s and self.reported:
            return
        self._last = now
        self.reported.append((step, total))
        try:
            with session_scope(self.context.settings) as session:
                recorded = record_progress(session, self.job_id, owner=self.owner, step=step, total=total)
            if recorded:
                announce_progress(self.context.broker(), self.job_id, step=step, total=total)
        except (SQLAlchemyError, redis.RedisError):
            log.warning("could not report progress of job %s", self.job_id, exc_info=True)
