"""The runs in flight in one worker process, watched by a thread of their own, so that the denoising
never waits on the database between two steps.

Before each step a run asks whether it should stop (its job canceled), and after it tells its progress.
With step-level batching both are asked of every member by the batch loop's one thread
(workers.runtime.batch_loop) between two UNet calls; a query or an update there stalls every job of the
batch, and on a GPU a round trip to Postgres costs about what a step does. Here they cost a look in
memory: the watch's thread reads the cancel flags of every run it holds in one query every
CANCEL_POLL_S, and writes their progress in one statement (and announces it on Redis, for the API's
event streams) at a run's first step at once, then at most every PROGRESS_EVERY_S, and at its last. A
50-step generation on a GPU (~40 ms a step) is written about five times, not fifty; a failed write
costs the reader a stale figure, never the run: progress is best effort, and a failed cancel poll is
retried at the next.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

import redis
from sqlalchemy.exc import SQLAlchemyError

from core.settings import Settings
from db.engine import session_scope
from db.job_runs import cancel_requested_among, record_progress_many
from jobs.job_events import announce_progress

log = logging.getLogger(__name__)

CANCEL_POLL_S: Final = 0.25  # how soon a requested cancel stops a run (one query for all runs)
PROGRESS_EVERY_S: Final = 0.5  # how often a run's progress is written, beside its first and last step


@dataclass(eq=False)
class WatchedRun:
    """One run's view of the watch: its cancel flag, and the progress it tells (its OnStep hook)."""

    job_id: uuid.UUID
    owner: str  # the run's, taken in its task: the batch loop's thread calls `report`
    every_s: float
    canceled: bool = False
    reported: list[tuple[int, int]] = field(default_factory=list)  # what was handed to be written
    _due: list[tuple[int, int]] = field(default_factory=list)
    _last: float = float("-inf")
    _wake: Callable[[], None] = lambda: None

    def report(self, step: int, total: int) -> None:
        """Progress after a step: the first and the last are written at once, the others at most every
        `every_s`, the newest of them."""
        now = time.monotonic()
        urgent = not self.reported or step >= total
        if not urgent and now - self._last < self.every_s:
            return
        self._last = now
        self.reported.append((step, total))
        self._due.append((step, total))
        if urgent:
            self._wake()

    def take_due(self) -> list[tuple[int, int]]:
        due, self._due = self._due, []
        return due


class RunWatch:
    """Cancel flags and progress of a process's runs, read and written by one thread of its own, started
    with the first run and ended with the last."""

    def __init__(
        self,
        settings: Settings,
        broker: Callable[[], redis.Redis],
        *,
        cancel_every_s: float = CANCEL_POLL_S,
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self.settings = settings
        self._broker = broker
        self.cancel_every_s = cancel_every_s
        self.progress_every_s = progress_every_s
        self._runs: dict[uuid.UUID, WatchedRun] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._woken = False
        self._writing = threading.Lock()  # one write at a time: announcements keep each run's order

    @contextmanager
    def watching(self, job_id: uuid.UUID, owner: str) -> Iterator[WatchedRun]:
        """Watch the run of `job_id` for the block; what it reported is written before the block ends."""
        run = WatchedRun(job_id, owner, self.progress_every_s, _wake=self._wake)
        with self._lock:
            self._runs[job_id] = run
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="run-watch", daemon=True)
                self._thread.start()
        try:
            yield run
        finally:
            self._write_progress([run])  # its last step, before the run completes the job
            with self._lock:
                if self._runs.get(job_id) is run:
                    del self._runs[job_id]

    def _wake(self) -> None:
        with self._lock:
            self._woken = True
            self._lock.notify_all()

    def _watch(self) -> None:
        next_poll = 0.0
        while True:
            with self._lock:
                if not self._runs:
                    self._thread = None
                    return
                timeout = max(0.0, min(next_poll - time.monotonic(), self.progress_every_s))
                if not self._woken:
                    self._lock.wait(timeout)
                self._woken = False
                runs = list(self._runs.values())
            self._write_progress(runs)
            if time.monotonic() >= next_poll:
                self._poll_cancels(runs)
                next_poll = time.monotonic() + self.cancel_every_s

    def _poll_cancels(self, runs: list[WatchedRun]) -> None:
        try:
            with session_scope(self.settings) as session:
                canceled = cancel_requested_among(session, [run.job_id for run in runs])
        except SQLAlchemyError:  # Postgres unreachable: asked again at the next poll
            log.warning("could not read the cancel flags of %d runs", len(runs), exc_info=True)
            return
        for run in runs:
            if run.job_id in canceled:
                run.canceled = True

    def _write_progress(self, runs: list[WatchedRun]) -> None:
        with self._writing:
            self._write_due(runs)

    def _write_due(self, runs: list[WatchedRun]) -> None:
        due = [(run, step, total) for run in runs for step, total in run.take_due()]
        if not due:
            return
        newest = {run.job_id: (run.job_id, run.owner, step, total) for run, step, total in due}
        try:
            with session_scope(self.settings) as session:
                written = record_progress_many(session, list(newest.values()))
            with self._broker().pipeline(transaction=False) as announcements:
                for run, step, total in due:  # every step handed over, in order: first, newest, last
                    if run.job_id in written:
                        announce_progress(announcements, run.job_id, step=step, total=total)
                announcements.execute()
        except (SQLAlchemyError, redis.RedisError):
            log.warning("could not report the progress of %d runs", len(newest), exc_info=True)
