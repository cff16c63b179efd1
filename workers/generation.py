"""The GPU task bodies: a miss generates and fills the cache; a hit reuses a cached entry. The job's
kind (workers.kinds) runs it: an image job on the role's model, a video job on the video model.

Each runs under a lease on the job row (db.job_runs): a redelivered task waits for the lease or finds
the job ended, so a job is generated and completed once.
"""

from __future__ import annotations

import uuid

from workers.context import WorkerContext
from workers.job import claim_job
from workers.kinds import kind_of
from workers.lease import LeaseKeeper


def generate_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cache_miss: a full T-step generation with capture; store, cache, complete, notify."""
    job = claim_job(context, job_id)
    if job is None:
        return
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        kind_of(job.kind).generate(context, job, lease)


def reuse_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cache_hit: T-k steps from the cached entry admission chose (an image job: NIRVANA's resume or
    MoDM's refine; a video job: FlexCache's whole or stitched hit). When the entry or its state was
    evicted since admission, the job runs as a miss instead."""
    job = claim_job(context, job_id)
    if job is None:
        return
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        kind_of(job.kind).reuse(context, job, lease)
