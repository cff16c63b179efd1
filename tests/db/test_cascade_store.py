"""What the cascade remembers, on the real database: an escalation happens once, by the lease holder;
the discriminators are versioned; the allocator's latest threshold is the one light workers apply."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import delete

from core.settings import Settings
from core.vocabulary import JobStatus
from db import cascade as cascade_db
from db.engine import session_scope
from db.job_runs import claim_run, utcnow
from db.models import CascadeDecision, Discriminator, Job, Tenant

pytestmark = pytest.mark.integration

STAGE = cascade_db.LightStage(
    light_model="lab-small",
    light_evals={"lab-small": 4},
    light_ms=12.5,
    score=0.2,
    threshold=0.5,
    escalated=True,
    discriminator_version=1,
)


def _claimed_job(settings: Settings, owner: str) -> uuid.UUID:
    with session_scope(settings) as session:
        tenant = Tenant(name=f"cascade-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_AAAA")
        session.add(tenant)
        session.flush()
        job = Job(tenant_id=tenant.id, prompt="a fox", seed=1, steps=10, width=64, height=64, guidance=7.5)
        job.route, job.admitted_at = "miss", utcnow()
        session.add(job)
        session.flush()
        claim_run(session, job.id, owner=owner, lease_s=60, max_attempts=3)
        return job.id


def test_an_escalation_happens_once_and_only_by_the_lease_holder(db_settings: Settings) -> None:
    job_id = _claimed_job(db_settings, "light-1")
    with session_scope(db_settings) as session:
        assert not cascade_db.escalate(session, job_id, owner="someone-else", stage=STAGE)
        assert cascade_db.escalate(session, job_id, owner="light-1", stage=STAGE)
    with session_scope(db_settings) as session:
        assert not cascade_db.escalate(session, job_id, owner="light-1", stage=STAGE)  # a redelivery: nothing
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.route, job.lease_owner, job.attempts) == (
            JobStatus.STARTING.value,
            "heavy",
            None,
            0,
        )
        assert cascade_db.light_stage(session, job_id) == STAGE
        # the heavy run claims it as a new attempt; started_at stays the light stage's (one started event)
        claim = claim_run(session, job_id, owner="heavy-1", lease_s=60, max_attempts=3)
        assert claim.job is not None and claim.job.attempts == 1 and not claim.first_start


def test_scores_and_counts_of_the_window(db_settings: Settings) -> None:
    since = utcnow() - timedelta(seconds=1)
    ids = [_claimed_job(db_settings, f"light-{i}") for i in range(3)]
    with session_scope(db_settings) as session:
        cascade_db.escalate(session, ids[0], owner="light-0", stage=STAGE)
        kept = cascade_db.LightStage(**{**STAGE.as_json(), "score": 0.9, "escalated": False})
        cascade_db.record_light_stage(session, ids[1], owner="light-1", stage=kept)
    with session_scope(db_settings) as session:
        assert {0.2, 0.9} <= set(cascade_db.scores_since(session, since))
        counts = cascade_db.cascade_counts(session, since)
        assert counts.light >= 2 and counts.escalated >= 1


def test_discriminators_are_versioned_and_pruned(db_settings: Settings) -> None:
    light = f"lab:small-{uuid.uuid4().hex[:6]}"
    with session_scope(db_settings) as session:
        versions = [
            cascade_db.save_discriminator(
                session,
                light_model=light,
                heavy_model="lab:large",
                features="judge",
                accuracy=0.5 + i / 10,
                report={"i": i},
                model=b"{}",
                keep=2,
            )
            for i in range(3)
        ]
    with session_scope(db_settings) as session:
        assert (
            cascade_db.latest_discriminator_version(session, light_model=light, features="judge")
            == versions[-1]
        )
        stored = cascade_db.latest_discriminator(session, light_model=light, features="judge")
        assert stored is not None and stored.report == {"i": 2} and stored.accuracy == pytest.approx(0.7)
        assert cascade_db.latest_discriminator(session, light_model=light, features="clip") is None
        assert session.get(Discriminator, versions[0]) is None  # pruned: two kept
        session.execute(delete(Discriminator).where(Discriminator.light_model == light))


def test_the_latest_decision_sets_the_threshold(db_settings: Settings) -> None:
    with session_scope(db_settings) as session:
        session.execute(delete(CascadeDecision))
        assert cascade_db.current_threshold(session, default=0.5) == (0.5, "configured")
        for threshold in (0.3, 0.7):
            cascade_db.add_decision(
                session,
                CascadeDecision(
                    period_start=utcnow(),
                    period_seconds=60,
                    inputs={},
                    solution={},
                    threshold=threshold,
                    feasible=True,
                    objective=threshold,
                    solve_ms=1.0,
                    target_light=1,
                    target_heavy=1,
                    applied_light=1,
                    applied_heavy=1,
                    switches=[],
                ),
            )
            session.flush()
        threshold, source = cascade_db.current_threshold(session, default=0.5)
        assert threshold == 0.7 and source.startswith("decision ")
        session.execute(delete(CascadeDecision))
