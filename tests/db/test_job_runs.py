"""A job's run under a lease on the real database: no double runs, no double completions."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from core.settings import Settings
from core.vocabulary import JobStatus
from db.engine import session_scope
from db.job_runs import (
    ClaimOutcome,
    claim_run,
    complete,
    database_now,
    find_stuck,
    finish,
    record_run_error,
    renew_lease,
    reroute_to_miss,
    utcnow,
)
from db.models import Job, Tenant

pytestmark = pytest.mark.integration


def _job(settings: Settings) -> uuid.UUID:
    with session_scope(settings) as session:
        tenant = Tenant(name=f"runs-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_AAAA")
        session.add(tenant)
        session.flush()
        job = Job(tenant_id=tenant.id, prompt="a fox", seed=1, steps=50, width=64, height=64, guidance=7.5)
        session.add(job)
        session.flush()
        return job.id


def _claim(settings: Settings, job_id: uuid.UUID, owner: str, max_attempts: int = 3) -> ClaimOutcome:
    with session_scope(settings) as session:
        return claim_run(session, job_id, owner=owner, lease_s=60, max_attempts=max_attempts).outcome


def test_a_second_worker_waits_for_the_lease(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    assert _claim(db_settings, job_id, "w1") is ClaimOutcome.CLAIMED
    with session_scope(db_settings) as session:
        claim = claim_run(session, job_id, owner="w2", lease_s=60, max_attempts=3)
    assert claim.outcome is ClaimOutcome.LEASED and 55 < claim.retry_in_s <= 61


def test_leases_are_timed_by_the_database_clock_not_a_worker_s(
    db_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose clock runs an hour ahead neither takes a live lease from another nor sees it
    lapsed; nor does its renewal push the lease an hour out."""
    import db.job_runs as job_runs

    job_id = _job(db_settings)
    assert _claim(db_settings, job_id, "w1") is ClaimOutcome.CLAIMED
    monkeypatch.setattr(job_runs, "utcnow", lambda: utcnow() + timedelta(hours=1))
    assert _claim(db_settings, job_id, "w2") is ClaimOutcome.LEASED
    with session_scope(db_settings) as session:
        assert job_id not in {item.job_id for item in find_stuck(session, older_than_s=3600)}
        assert renew_lease(session, job_id, owner="w1", lease_s=60)
    with session_scope(db_settings) as session:
        job = session.get_one(Job, job_id)
        assert job.lease_until is not None
        left = job.lease_until - database_now(session)
    assert timedelta(seconds=55) < left <= timedelta(seconds=61)


def test_only_the_lease_holder_completes_and_a_redelivery_finds_it_done(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    assert _claim(db_settings, job_id, "w1") is ClaimOutcome.CLAIMED
    with session_scope(db_settings) as session:
        assert not complete(
            session, job_id, owner="w2", models_used=["m"], denoiser_evals={"m": 50}, final_latent_key="k"
        )
        assert complete(
            session, job_id, owner="w1", models_used=["m"], denoiser_evals={"m": 50}, final_latent_key="k"
        )
        assert not complete(
            session, job_id, owner="w1", models_used=["m"], denoiser_evals={"m": 50}, final_latent_key="k"
        )
    assert _claim(db_settings, job_id, "w2") is ClaimOutcome.DONE
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.SUCCEEDED and job.attempts == 1


def test_attempts_are_counted_and_the_job_fails_with_a_reason_past_the_limit(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    for owner in ("w1", "w2"):
        assert _claim(db_settings, job_id, owner, max_attempts=2) is ClaimOutcome.CLAIMED
        with session_scope(db_settings) as session:  # the worker died: its lease runs out
            job = session.get(Job, job_id)
            assert job is not None
            job.lease_until = utcnow() - timedelta(seconds=1)
    assert _claim(db_settings, job_id, "w3", max_attempts=2) is ClaimOutcome.EXHAUSTED
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.FAILED and "2 attempts" in (job.error or "")


FULL = "OSError: [Errno 27] File too large"


def test_a_job_that_gives_up_after_its_runs_raised_says_the_last_error(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    for owner, error in (("w1", "OSError: [Errno 28] No space left on device"), ("w2", None)):
        assert _claim(db_settings, job_id, owner, max_attempts=2) is ClaimOutcome.CLAIMED
        with session_scope(db_settings) as session:
            if error is not None:
                assert not record_run_error(session, job_id, owner="w0", error="not the holder")
                assert record_run_error(session, job_id, owner=owner, error=error)
            job = session.get(Job, job_id)
            assert job is not None and job.status == JobStatus.PROCESSING and job.error == error
            job.lease_until = utcnow() - timedelta(seconds=1)
        if owner == "w2":  # a second run that raises says so in the end, not the first run's error
            with session_scope(db_settings) as session:
                assert record_run_error(session, job_id, owner="w2", error=FULL)
    assert _claim(db_settings, job_id, "w3", max_attempts=2) is ClaimOutcome.EXHAUSTED
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.FAILED
        assert job.error == f"gave up after 2 attempts; the last failed with: {FULL}"


def test_cancel_before_start_ends_canceled_and_ended_jobs_stay_ended(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.cancel_requested = True
    assert _claim(db_settings, job_id, "w1") is ClaimOutcome.CANCELED
    with session_scope(db_settings) as session:
        assert not finish(session, job_id, JobStatus.FAILED, error="late")
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.CANCELED and job.error is None


def test_reroute_to_miss_gives_the_attempt_back(db_settings: Settings) -> None:
    job_id = _job(db_settings)
    assert _claim(db_settings, job_id, "w1") is ClaimOutcome.CLAIMED
    with session_scope(db_settings) as session:
        reroute_to_miss(session, job_id, owner="w1")
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.route, job.attempts, job.lease_owner) == ("starting", "miss", 0, None)
    assert _claim(db_settings, job_id, "w2") is ClaimOutcome.CLAIMED


def test_stuck_jobs_are_found_for_the_reconciler(db_settings: Settings) -> None:
    waiting, running = _job(db_settings), _job(db_settings)
    assert _claim(db_settings, running, "w1") is ClaimOutcome.CLAIMED
    with session_scope(db_settings) as session:
        old = utcnow() - timedelta(minutes=10)
        for job_id in (waiting, running):
            job = session.get(Job, job_id)
            assert job is not None
            job.created_at = old
        job = session.get(Job, running)
        assert job is not None
        job.lease_until = old
    with session_scope(db_settings) as session:
        stuck = {item.job_id for item in find_stuck(session, older_than_s=60)}
    assert {waiting, running} <= stuck
