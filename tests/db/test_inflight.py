"""tenants.inflight, kept by the jobs_count_inflight trigger (migration 0004), and the in-flight limit
under concurrent submissions, each on its own connection as from several API processes (the intake's
INSERT, db.job_intake): never more unfinished jobs than the limit."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from sqlalchemy import delete, select, update

from core.params import GenerationParams
from core.settings import Settings
from db import jobs as jobs_db
from db.engine import session_scope
from db.job_intake import Outcome, PendingJob, Written, insert_jobs
from db.models import Job, Tenant
from db.tenants import create_tenant

pytestmark = pytest.mark.integration


def _tenant(settings: Settings, limit: int) -> uuid.UUID:
    with session_scope(settings) as session:
        return create_tenant(
            session=session, name=f"inflight-{uuid.uuid4().hex[:8]}", inflight_limit=limit
        ).id


def _inflight(settings: Settings, tenant_id: uuid.UUID) -> int:
    with session_scope(settings) as session:
        return int(session.scalar(select(Tenant.inflight).where(Tenant.id == tenant_id)) or 0)


def _submit(settings: Settings, tenant_id: uuid.UUID) -> bool:
    """One job written as the intake writes it, on a connection of its own: whether it was created."""
    new = jobs_db.NewJob(params=GenerationParams(prompt="p", seed=1, steps=10, width=64, height=64))
    dsn = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)

    async def write() -> list[Written]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            return await insert_jobs(conn, [PendingJob(tenant_id=tenant_id, new=new, job_id=uuid.uuid4())])

    [written] = asyncio.run(write())
    return written.outcome is Outcome.CREATED


def test_the_trigger_counts_unfinished_jobs(db_settings: Settings) -> None:
    tenant_id = _tenant(db_settings, limit=100)
    assert [_submit(db_settings, tenant_id) for _ in range(3)] == [True] * 3
    assert _inflight(db_settings, tenant_id) == 3
    with session_scope(db_settings) as session:
        ids = list(session.scalars(select(Job.id).where(Job.tenant_id == tenant_id)))
        session.execute(update(Job).where(Job.id == ids[0]).values(status="processing"))  # still unfinished
        session.execute(update(Job).where(Job.id == ids[1]).values(status="succeeded"))
    assert _inflight(db_settings, tenant_id) == 2
    with session_scope(db_settings) as session:
        session.execute(delete(Job).where(Job.id == ids[2]))
    assert _inflight(db_settings, tenant_id) == 1
    with session_scope(db_settings) as session:  # a tenant deleted with its jobs (the cascade)
        session.execute(delete(Tenant).where(Tenant.id == tenant_id))
        assert session.get(Tenant, tenant_id) is None


def test_concurrent_submissions_never_pass_the_limit(db_settings: Settings) -> None:
    tenant_id = _tenant(db_settings, limit=5)
    with ThreadPoolExecutor(max_workers=12) as pool:
        accepted = list(pool.map(lambda _: _submit(db_settings, tenant_id), range(24)))
    assert sum(accepted) == 5
    assert _inflight(db_settings, tenant_id) == 5
    with session_scope(db_settings) as session:
        assert jobs_db.count_active(session=session, tenant_id=tenant_id) == 5
