"""Short, renewed leases: a live run keeps its job; a run that lost the job (another
worker took it after a lapse) stops before it writes anything; a dead run's job is found at once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, update

from core.errors import LeaseBusy, LeaseLost
from core.settings import Settings
from core.vocabulary import JobStatus, Role
from db.engine import session_scope
from db.job_runs import ClaimOutcome, claim_run, find_stuck, renew_lease
from db.models import CacheEntry, Job
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.generation import generate_job
from workers.lease import LeaseKeeper

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse at dusk"


def _claimed(settings: Settings, owner: str = "w1") -> uuid.UUID:
    job_id = make_job(settings, make_tenant(settings), PROMPT)
    with session_scope(settings) as session:
        claim = claim_run(session, job_id, owner=owner, lease_s=settings.lease_s, max_attempts=3)
        assert claim.outcome is ClaimOutcome.CLAIMED
    return job_id


def _row(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def test_only_the_holder_of_a_running_job_renews_its_lease(task_settings: Settings) -> None:
    job_id = _claimed(task_settings)
    before = _row(task_settings, job_id).lease_until
    with session_scope(task_settings) as session:
        assert renew_lease(session, job_id, owner="w1", lease_s=300)
        assert not renew_lease(session, job_id, owner="w2", lease_s=300)
    after = _row(task_settings, job_id).lease_until
    assert before is not None and after is not None and after > before
    with session_scope(task_settings) as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.SUCCEEDED.value))
    with session_scope(task_settings) as session:
        assert not renew_lease(session, job_id, owner="w1", lease_s=300)  # ended: nothing to hold


def test_an_expired_lease_is_stuck_at_once(task_settings: Settings) -> None:
    settings = task_settings.model_copy(update={"lease_s": 2.0, "lease_renew_s": 1.0})
    job_id = _claimed(settings)
    with session_scope(settings) as session:
        assert job_id not in {stuck.job_id for stuck in find_stuck(session, older_than_s=120)}
    time.sleep(2.2)  # the lease lapses: no renewal came (the run died)
    with session_scope(settings) as session:
        assert job_id in {stuck.job_id for stuck in find_stuck(session, older_than_s=120)}


def test_the_heartbeat_renews_and_notices_a_taken_job(task_settings: Settings) -> None:
    settings = task_settings.model_copy(update={"lease_s": 4.0, "lease_renew_s": 0.2})
    job_id = _claimed(settings)
    first = _row(settings, job_id).lease_until
    with LeaseKeeper(settings, job_id, owner="w1") as lease:
        time.sleep(0.7)
        renewed = _row(settings, job_id).lease_until
        assert first is not None and renewed is not None and renewed > first
        lease.check()  # held: no error
        with session_scope(settings) as session:  # another worker took it after a lapse
            session.execute(update(Job).where(Job.id == job_id).values(lease_owner="w2"))
        time.sleep(0.7)
        assert lease.lost
        with pytest.raises(LeaseLost):
            lease.check()


def test_a_run_that_loses_its_job_midway_writes_nothing(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = task_settings.model_copy(update={"lease_s": 4.0, "lease_renew_s": 0.1})
    context = WorkerContext(settings, Role.LARGE, dispatcher=context_for(Role.LARGE).dispatcher)
    job_id = make_job(settings, make_tenant(settings), PROMPT)
    runtime = context.runtime()
    real_generate = runtime.generate

    def taken_midway(*args: Any, **kwargs: Any) -> Any:
        with session_scope(settings) as session:  # the thief: as if our lease had lapsed
            session.execute(update(Job).where(Job.id == job_id).values(lease_owner="thief"))
        time.sleep(0.5)  # a few heartbeats
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(runtime, "generate", taken_midway)
    with pytest.raises(LeaseLost):
        generate_job(context, job_id)
    job = _row(settings, job_id)
    assert job.status == JobStatus.PROCESSING.value and job.lease_owner == "thief"  # not ended by us
    assert job.final_latent_key is None
    with session_scope(settings) as session:
        assert session.scalar(select(func.count()).where(CacheEntry.source_job_id == job_id)) == 0
    assert not [path for path in settings.blob_root.rglob("*") if path.is_file()]  # no blob written


def test_two_deliveries_of_one_job_in_one_process_do_not_both_claim_it(task_settings: Settings) -> None:
    """A worker with batching threads runs several tasks in one process: each run names itself in the
    lease, so a second delivery of a job the process is running waits (LEASED) instead of running it
    again and spending another attempt."""
    from workers.job import claim_job

    context = WorkerContext(task_settings, Role.LARGE)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    with context.run_owner() as first:
        assert first.startswith("large:") and context.owner == first
        assert claim_job(context, job_id) is not None
    with context.run_owner() as second, pytest.raises(LeaseBusy):
        assert second != first
        claim_job(context, job_id)
    assert _row(task_settings, job_id).attempts == 1
    assert context.owner.count(":") == 2  # outside a run: the process
