"""A run whose model call hangs, on the real runtime (the worker's batch loop, the tiny models) against the
real database: its lease is no longer renewed once the step has hung run_stall_s, the lease lapses, the
reconciler sends the job to another worker, and the worker is not alive until the call returns. And a run
past its deadline stops at its next step (workers.lease, workers.run_clock, workers.liveness)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
import redis
from sqlalchemy import update

from core.errors import LeaseLost
from core.settings import Settings
from core.vocabulary import JobStatus, Role, Route
from db.engine import session_scope
from db.job_runs import ClaimOutcome, claim_run, utcnow
from db.models import Job
from jobs.passes.reconcile import reconcile
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers import liveness
from workers.context import WorkerContext
from workers.generation import generate_job
from workers.lease import LeaseKeeper

pytestmark = pytest.mark.integration

HANG_AT_CALL = 4  # the UNet's fourth call does not return until released


def _row(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def _hang_the_unet(
    context: WorkerContext, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Event]:
    """Make the hosted UNet's HANG_AT_CALL-th call wait on an Event: a model call that hangs."""
    unet = context.runtime()._require_pipeline("a test").unet
    real_forward = unet.forward
    entered, release = threading.Event(), threading.Event()
    calls = 0

    def forward(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == HANG_AT_CALL:
            entered.set()
            release.wait(60)
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(unet, "forward", forward)
    return entered, release


def _reconcile_and_claim_elsewhere(settings: Settings, job_id: uuid.UUID) -> None:
    """The reconciler sends the job again, at the front of its route's queue; another worker claims it."""
    resend = RecordingDispatcher()
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        reconcile(settings, resend, broker)
    finally:
        broker.close()
    # The session's database holds other tests' stuck jobs too: this one must be among those sent.
    assert str(job_id) in [sent.args[0] for sent in resend.of(TaskName.GENERATE)]
    with session_scope(settings) as session:
        claim = claim_run(session, job_id, owner="another-worker", lease_s=60, max_attempts=3)
        assert claim.outcome is ClaimOutcome.CLAIMED


def test_a_hung_model_call_lets_the_lease_lapse_and_the_reconciler_sends_the_job_elsewhere(
    task_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = task_settings.model_copy(
        update={"lease_s": 2.0, "lease_renew_s": 0.2, "run_stall_s": 1.0, "max_batch": 2}
    )
    context = WorkerContext(settings, Role.LARGE, dispatcher=RecordingDispatcher())
    assert context.runtime().batching  # the step runs in the worker's batch loop
    job_id = make_job(settings, make_tenant(settings), "a lighthouse at dusk", route=Route.MISS.value)
    with session_scope(settings) as session:
        session.execute(update(Job).where(Job.id == job_id).values(admitted_at=utcnow()))
    entered, release = _hang_the_unet(context, monkeypatch)
    hung_before = liveness.pulse().reading().hung_runs
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            with context.run_owner():
                generate_job(context, job_id)
            outcome.append(None)
        except BaseException as error:  # what the task body would see
            outcome.append(error)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        assert entered.wait(60), "the run never reached its hanging step"
        renewed = _row(settings, job_id).lease_until
        assert renewed is not None and renewed > utcnow()  # the steps before it renewed the lease
        # The step hangs: after run_stall_s the heartbeat stops, the 2 s lease lapses.
        deadline = time.monotonic() + 15
        while _row(settings, job_id).lease_until > utcnow() and time.monotonic() < deadline:  # type: ignore[operator]
            time.sleep(0.2)
        job = _row(settings, job_id)
        assert job.status == JobStatus.PROCESSING.value and job.lease_until is not None
        assert job.lease_until <= utcnow(), "a hung run's lease was still renewed"
        assert liveness.pulse().reading().hung_runs == hung_before + 1  # the worker is not alive
        verdict = liveness.judge(
            liveness.pulse().reading(), now=time.time(), queued=0, free_slots=1, stall_s=45.0
        )
        assert not verdict.alive and "hung" in verdict.reason
        _reconcile_and_claim_elsewhere(settings, job_id)
    finally:
        release.set()  # the hung call returns at last
        runner.join(60)
    # The hung run finds its lease lost and writes nothing; the worker counts it hung no more.
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost)
    job = _row(settings, job_id)
    assert job.lease_owner == "another-worker" and job.final_latent_key is None
    assert job.status == JobStatus.PROCESSING.value
    assert liveness.pulse().reading().hung_runs == hung_before


def test_a_run_past_its_deadline_stops_renewing_and_may_no_longer_write(task_settings: Settings) -> None:
    settings = task_settings.model_copy(
        update={"lease_s": 4.0, "lease_renew_s": 0.2, "run_deadline_floor_s": 0.5, "run_deadline_slack": 1.0}
    )
    job_id = make_job(settings, make_tenant(settings), "a lighthouse at dusk")
    with session_scope(settings) as session:
        claim_run(session, job_id, owner="w1", lease_s=settings.lease_s, max_attempts=3)
    with LeaseKeeper(settings, job_id, owner="w1") as lease:
        lease.step_begins()
        lease.step_ended(1, 3)  # 3 steps of no time: the deadline is the 0.5 s floor
        assert not lease.lost
        time.sleep(0.8)
        assert lease.lost  # asked before the next step: the run stops there
        with pytest.raises(LeaseLost, match="past its deadline"):
            lease.check()
        expires = _row(settings, job_id).lease_until
        time.sleep(0.6)  # three heartbeats: none renews
        assert _row(settings, job_id).lease_until == expires
