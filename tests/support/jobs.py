"""A job row written for a test that needs one in place (a webhook's delivery, a run), with the columns the
API's intake would write (db.job_intake.PendingJob), in the test's own ORM session."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from db.job_intake import PendingJob
from db.jobs import NewJob
from db.models import Job


def add_job(session: Session, tenant_id: uuid.UUID, new: NewJob) -> Job:
    """Insert a 'starting' job of the tenant (flushed, not committed: the caller's session owns it)."""
    job = Job(**PendingJob(tenant_id=tenant_id, new=new, job_id=uuid.uuid4()).params())
    session.add(job)
    session.flush()
    session.refresh(job)  # the database's defaults (created_at, counters) filled in
    return job
