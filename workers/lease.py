"""A running GPU task keeps its job's lease alive: a heartbeat renews it every lease_renew_s.

The lease is lost when a renewal finds the job no longer ours (another worker claimed it after a
lapse, or it ended), or when no renewal succeeded for a whole lease (Postgres unreachable: another
worker may have taken the job meanwhile). A lost lease stops the run before it writes anything
(workers.operation checks it in the denoising loop and before storing); the reconciler sends the
job again once the lease has expired, so a dead or cut-off run is retried within about
lease_s + reconcile_period_s.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from types import TracebackType

from core.errors import LeaseLost
from core.settings import Settings
from db.engine import session_scope
from db.job_runs import renew_lease
from workers import liveness
from workers.run_clock import DeadlinePolicy, RunClock

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one job's lease on a thread of its own while the run lasts and progresses (a context
    manager). The run tells its steps through step_begins, step_ended and run_ended."""

    def __init__(self, settings: Settings, job_id: uuid.UUID, *, owner: str) -> None:
        self.settings = settings
        self.job_id = job_id
        self.owner = owner
        self._lost: str | None = None
        self._hung = False  # this run counted in the worker's pulse as hung
        self._halt = threading.Event()
        self._last_renewed = time.monotonic()  # the claim just set the lease
        self.clock = RunClock(DeadlinePolicy.from_settings(settings), now=self._last_renewed)
        self._thread = threading.Thread(target=self._beat, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._halt.set()
        self._thread.join()
        if self._hung:  # the hung call returned after all: the worker is no longer held by it
            liveness.pulse().run_recovered()

    @property
    def lost(self) -> bool:
        """Whether the run may no longer write; asked before every step, so a run past its deadline
        stops at its next step."""
        if self._lost is None:
            overdue = self.clock.overdue(time.monotonic())
            if overdue is not None:
                self._lose(overdue)
        return self._lost is not None

    def step_begins(self) -> None:
        self.clock.step_begins(time.monotonic())

    def step_ended(self, step: int, total: int) -> None:
        self.clock.step_ended(step, total, time.monotonic())

    def run_ended(self) -> None:
        self.clock.run_ended()

    def check(self) -> None:
        """Raise LeaseLost if the run may no longer write as the job's holder."""
        if self._lost is None and time.monotonic() - self._last_renewed >= self.settings.lease_s:
            self._lose("no renewal for a whole lease")  # the heartbeat itself may be stuck
        if self.lost:
            raise LeaseLost(f"job {self.job_id}: lease lost ({self._lost}); stopping before writing")

    def _beat(self) -> None:
        while not self._halt.wait(self.settings.lease_renew_s) and self._lost is None:
            if self._progressing():
                self.renew()

    def _progressing(self) -> bool:
        """Whether the run still makes progress; a hung step also makes the worker not alive. A run that
        stopped is not renewed again: its lease lapses and the reconciler sends the job elsewhere."""
        now = time.monotonic()
        stalled = self.clock.stalled(now)
        if stalled is not None and not self._hung:
            self._hung = True
            liveness.pulse().run_hung()
        fault = stalled or self.clock.overdue(now)
        if fault is not None:
            self._lose(f"{fault}; its lease is left to lapse")
        return fault is None

    def renew(self) -> None:
        try:
            with session_scope(self.settings) as session:
                held = renew_lease(session, self.job_id, owner=self.owner, lease_s=self.settings.lease_s)
        except Exception as error:  # Postgres unreachable: tolerated until the lease may have lapsed
            log.warning("job %s: lease renewal failed: %s", self.job_id, error)
            if time.monotonic() - self._last_renewed >= self.settings.lease_s:
                self._lose(f"renewals failed for {self.settings.lease_s:.0f}s: {error}")
            return
        if held:
            self._last_renewed = time.monotonic()
        else:
            self._lose("the job is no longer this worker's")

    def _lose(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            log.warning("job %s: lease lost (%s); the run stops before writing", self.job_id, reason)
